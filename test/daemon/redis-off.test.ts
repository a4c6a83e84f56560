/**
 * A daemon without REDIS_URL loads no Redis client: ioredis and the Redis counters are imported
 * by openStores when a Redis URL is configured, not by the daemon's module graph, which every
 * daemon process (and every test that spawns one) loads at start.
 */
import { describe, expect, it } from 'vitest';
import { builtModule, loadedModules, moduleScript } from '../support/loaded-modules.js';

const SCRIPT = `
await import(${JSON.stringify(builtModule('daemon/daemon.js'))});
process.stderr.write('MARK daemon loaded\\n');
await import(${JSON.stringify(builtModule('store/counters/redis-counters.js'))});
`;

describe('Redis off', () => {
  it("when the daemon's modules are loaded, then ioredis is not among them; the Redis counters bring it", async () => {
    const { code, between, errors } = await loadedModules(moduleScript(SCRIPT));
    expect(code, errors).toBe(0);
    const daemon = between(null, 'daemon loaded');
    const isRedis = (loaded: string) => /\/node_modules\/ioredis\/|\/redis-counters\.js$/.test(loaded);
    expect(daemon.some((loaded) => loaded.endsWith('/dist/daemon/daemon.js'))).toBe(true);
    expect(daemon.filter(isRedis)).toEqual([]);
    // The check sees ioredis when it is loaded.
    expect(between('daemon loaded', null).filter(isRedis).length).toBeGreaterThan(0);
  });
});
