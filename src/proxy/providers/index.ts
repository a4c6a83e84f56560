import { anthropicAdapter } from './anthropic.js';
import { googleAdapter } from './google.js';
import { openaiAdapter } from './openai.js';
import type { ProviderAdapter, ProviderType } from './types.js';

export { NO_TOKENS } from './types.js';
export type { InspectedRequest, ProviderAdapter, ProviderType, TokenFields, UsageTracker } from './types.js';

const adapters: Readonly<Record<ProviderType, ProviderAdapter>> = Object.freeze({
  openai: openaiAdapter,
  anthropic: anthropicAdapter,
  google: googleAdapter,
});

export const PROVIDER_TYPES: readonly ProviderType[] = Object.freeze(['openai', 'anthropic', 'google']);

/** For validating configuration: a provider's `type` must be one of these. */
export function isProviderType(value: unknown): value is ProviderType {
  return (PROVIDER_TYPES as readonly unknown[]).includes(value);
}

export function adapterFor(type: ProviderType): ProviderAdapter {
  return adapters[type];
}
