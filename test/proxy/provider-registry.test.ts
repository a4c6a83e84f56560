import { Pool } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createProviderRegistry, type ProviderRegistry } from '../../src/proxy/provider-registry.js';

describe('provider registry', () => {
  let registry: ProviderRegistry | undefined;
  afterEach(async () => registry?.close());

  it('when a provider is configured, then its pool is undici’s Pool, loaded without the rest of undici', () => {
    registry = createProviderRegistry([{ name: 'openai', type: 'openai', upstream: 'http://127.0.0.1:9/v1' }]);
    const provider = registry.get('openai')!;
    // The registry requires undici's Pool by its file path (lib/dispatcher/pool.js): an upgrade
    // that moves it fails here, not in production.
    expect(provider.pool).toBeInstanceOf(Pool);
    expect(provider.origin).toBe('http://127.0.0.1:9');
    expect(provider.basePath).toBe('/v1');
  });
});
