/**
 * What the tests of key and tag budgets share: a test API on a backend with a clock the tests set,
 * a workspace in Kolkata with the model's prices, a step of $0.002, the Redis copy flushed or
 * searched, and a subject's recorded spend.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect } from 'vitest';
import { reconcile, type ReconcileReport } from '../../src/jobs/reconcile.js';
import { startTestApi, type Backend, type Caller, type TestApi } from './harness.js';
import { REDIS_URL } from './services.js';

export const MODEL = 'gpt-4o-mini';
/** $10 and $40 per million tokens: 100 prompt and 25 completion tokens cost $0.002. */
export const PRICES = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };
export const MODEL_CALL = { type: 'MODEL_CALL', model: MODEL, tool_name: null };

/** A Wednesday in Kolkata: its week started on Monday 2026-11-23, its month on the 1st. */
export const WEDNESDAY = new Date('2026-11-25T06:00:00Z');

export interface BudgetsApi {
  api: TestApi;
  /** What the API's clock says: a test sets it. @default WEDNESDAY */
  now: Date;
  /** A new workspace in Asia/Kolkata, with the model's prices. */
  workspace: () => ReturnType<TestApi['newWorkspace']>;
  /** A step of $0.002 (100 prompt and 25 completion tokens) when allowed; the step as created. */
  spend: (as: Caller, runId: string) => Promise<any>;
  /** Today's and yesterday's counters checked against the records (as the periodic pass does). */
  reconcile: (options: { repair: boolean }) => Promise<ReconcileReport>;
  /** Deletes the API's keys from Redis (on the other backends, nothing). */
  flushRedis: () => Promise<void>;
  /** The Redis copy's counters of a user with no id in the workspace (there is no such user). */
  countersOfNoUser: (workspaceId: string) => Promise<string[]>;
}

/** Registers the describe block's `beforeAll` and `afterAll`; `api` is set once the first ran. */
export function useBudgetsApi(backend: Backend): BudgetsApi {
  let redis: Redis | null = null;
  let sequence = 0;
  const keysOf = async function* (match: string) {
    if (!redis) return;
    for await (const keys of redis.scanStream({ match, count: 1_000 })) yield keys as string[];
  };
  const fixture: BudgetsApi = {
    api: undefined as unknown as TestApi,
    now: WEDNESDAY,
    workspace: async () => {
      const ws = await fixture.api.newWorkspace();
      expect((await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
      expect((await ws.api.request('PATCH', '/v1/workspace', { time_zone: 'Asia/Kolkata' })).status).toBe(200);
      return ws;
    },
    spend: async (as, runId) => {
      const step = (await as.request('POST', `/v1/runs/${runId}/steps`, { ...MODEL_CALL, sequence: ++sequence })).body;
      expect(step.status, JSON.stringify(step)).toBeDefined();
      if (step.status === 'ALLOWED')
        await as.request('PATCH', `/v1/runs/${runId}/steps/${step.id}`, {
          status: 'COMPLETED',
          prompt_tokens: 100,
          completion_tokens: 25,
        });
      return step;
    },
    reconcile: ({ repair }) =>
      reconcile(fixture.api.stores.db, fixture.api.stores.counters, { now: fixture.now, days: 2, repair }),
    flushRedis: async () => {
      for await (const keys of keysOf(`${fixture.api.stores.redisKeyPrefix}*`))
        if (keys.length > 0) await redis!.unlink(...keys);
    },
    countersOfNoUser: async (workspaceId) => {
      const found: string[] = [];
      for await (const keys of keysOf(`${fixture.api.stores.redisKeyPrefix}{${workspaceId}}:uspend:*`))
        found.push(...keys.filter((key) => key.endsWith(':')));
      return found;
    },
  };
  beforeAll(async () => {
    fixture.api = await startTestApi(backend, { clock: { now: () => fixture.now } });
    if (backend === 'postgres+redis') redis = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    redis?.disconnect();
    await fixture.api?.close();
  });
  return fixture;
}

/** The recorded spend of a budget's subject (`key:<id>`, `tag:<name>:<value>`), all days, in microdollars. */
export async function subjectSpendMicros(api: TestApi, workspaceId: string, subject: string): Promise<number> {
  const { rows } = await api.stores.db.query<{ spend: string | null }>(
    'SELECT sum(spend_micros) AS spend FROM subject_usage_daily WHERE workspace_id = $1 AND subject = $2',
    [workspaceId, subject],
  );
  return Number(rows[0]!.spend ?? 0);
}

/** Waits until no step of the workspace is unfinished (every result written). */
export async function settled(api: TestApi, workspaceId: string): Promise<void> {
  for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
    const { rows } = await api.stores.db.query<{ open: string | number }>(
      "SELECT count(*) AS open FROM steps WHERE workspace_id = $1 AND status = 'ALLOWED'",
      [workspaceId],
    );
    if (Number(rows[0]!.open) === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error('steps still unfinished after 20 s');
}
