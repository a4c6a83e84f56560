/** Fakes for the proxy's modules tested alone: a provider without a pool, a logger that remembers. */
import type { FastifyBaseLogger } from 'fastify';
import type { Provider } from '../../../src/proxy/provider-registry.js';
import { adapterFor, type ProviderType } from '../../../src/proxy/providers/index.js';

/** A provider of `type` whose pool is never used (nothing is forwarded). */
export function providerOf(type: ProviderType, name: string = type): Provider {
  return { name, type, adapter: adapterFor(type), origin: 'http://127.0.0.1:9', basePath: '', pool: null as never };
}

export interface LoggedLine {
  level: 'error' | 'warn' | 'info';
  fields: Record<string, unknown>;
  message: string;
}

/** A logger whose lines are kept in `lines`. */
export function rememberingLogger(): FastifyBaseLogger & { lines: LoggedLine[] } {
  const lines: LoggedLine[] = [];
  const at =
    (level: LoggedLine['level']) =>
    (fields: Record<string, unknown>, message: string): void => {
      lines.push({ level, fields, message });
    };
  return { lines, error: at('error'), warn: at('warn'), info: at('info') } as unknown as FastifyBaseLogger & {
    lines: LoggedLine[];
  };
}
