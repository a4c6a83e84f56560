/**
 * Two daemons on one database, as behind a load balancer: a test API with the proxy on (its fake
 * upstream), and a second app on its records with counters of its own on the same store (its own
 * Redis client on the first's key prefix, or the records), so that they share only what the
 * counters store. For the races of reserve mode through both.
 */
import { afterAll, beforeAll } from 'vitest';
import { RedisCounters, redisClient } from '../../src/store/counters/redis-counters.js';
import { SqlCounters } from '../../src/store/counters/sql-counters.js';
import type { CounterStore } from '../../src/store/counters/counters.js';
import type { FakeUpstreamOptions } from './fake-upstream.js';
import { startProxyTestApi, startSecondApp, type ProxyTestApi, type SecondApp } from './harness.js';
import { REDIS_URL } from './services.js';

export interface DaemonPair {
  /** The first daemon, with the stores, the workspaces and the fake upstream. */
  a: ProxyTestApi;
  b: SecondApp;
}

/** Registers the file's (or describe block's) `beforeAll` and `afterAll`; the fields are set once the first ran. */
export function useDaemonPair(
  backend: 'postgres+redis' | 'postgres+sql',
  options: { upstream?: FakeUpstreamOptions } = {},
): DaemonPair {
  const pair = {} as DaemonPair;
  let countersB: CounterStore | undefined;
  beforeAll(async () => {
    pair.a = await startProxyTestApi(backend, options);
    if (backend === 'postgres+redis') {
      const client = redisClient({ url: REDIS_URL, keyPrefix: pair.a.stores.redisKeyPrefix! });
      await client.connect();
      countersB = new RedisCounters(client, pair.a.stores.db);
    } else {
      countersB = new SqlCounters(pair.a.stores.db);
    }
    pair.b = await startSecondApp(pair.a, { counters: countersB });
  });
  afterAll(async () => {
    await pair.b?.close();
    await countersB?.close();
    await pair.a?.close();
  });
  return pair;
}
