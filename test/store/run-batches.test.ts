/**
 * The batch statements behind the run start and end group commits, against real Postgres and the
 * embedded database: insertRuns counts each admitted run once in its workspace's and user's day
 * (a blocked one only as a user seen), whatever the batch mixes; endRuns answers each end by its
 * own run; and on Postgres, batches of ends racing batches of step inserts over the same runs
 * never deadlock (both lock runs in id order).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import type { Decision } from '../../src/rules/engine.js';
import { GuardService } from '../../src/guard/guard-service.js';
import type { Db } from '../../src/store/db.js';
import { endRuns, insertRuns, insertSteps, type NewRun } from '../../src/store/runs.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';
import { runWithStep } from '../support/run-with-step.js';

const NOW = new Date('2026-05-04T12:00:00.123Z');
const ALLOW: Decision = {
  outcome: 'ALLOW',
  reason: null,
  evaluated_rules: { user_daily_budget: 'PASS', kill_switch: 'PASS', user_blocked: 'PASS' },
};
const BLOCKED: Decision = {
  outcome: 'DENY',
  reason: 'USER_BLOCKED',
  evaluated_rules: { kill_switch: 'PASS', user_blocked: 'DENY' },
};

describe.each(BACKENDS)('run batch statements on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  const newRun = (workspaceId: string, userId: string, day: string, status: NewRun['status'] = 'RUNNING'): NewRun => ({
    id: randomUUID(),
    workspaceId,
    userId,
    status,
    metadata: { agent: 'batch', n: [1, 2] },
    decision: status === 'RUNNING' ? ALLOW : BLOCKED,
    now: new Date(`${day}T12:00:00.123Z`),
    day,
  });
  const dayRows = async (table: 'usage_daily' | 'user_usage_daily', workspaceIds: string[]) => {
    const user = table === 'user_usage_daily' ? " || '/' || user_id" : '';
    const { rows } = await stores.db.query<{ k: string; runs: number }>(
      `SELECT (CASE WHEN workspace_id = $1 THEN 'a' ELSE 'b' END)${user} || '/' || day::text AS k, runs
       FROM ${table} WHERE workspace_id = ANY($2) ORDER BY 1`,
      [workspaceIds[0], workspaceIds],
    );
    return Object.fromEntries(rows.map((r) => [r.k, Number(r.runs)]));
  };

  it('when a batch mixes workspaces, users, days and blocked starts, then each day and user counts only its admitted runs', async () => {
    const a = (await createWorkspace(stores.db, 'batch-a', 'enterprise')).id;
    const b = (await createWorkspace(stores.db, 'batch-b', 'enterprise')).id;
    const first = [
      newRun(a, 'u1', '2026-05-04'),
      newRun(a, 'u1', '2026-05-04'),
      newRun(a, 'u2', '2026-05-04'),
      newRun(a, 'u2', '2026-05-04', 'BLOCKED'),
      newRun(a, 'u3', '2026-05-04', 'BLOCKED'),
      newRun(b, 'u1', '2026-05-04'),
      newRun(a, 'u1', '2026-05-05'),
      newRun(a, 'lone \ud800 half', '2026-05-04'),
    ];
    await insertRuns(stores.db, first);
    // A second batch adds to the rows the first made.
    await insertRuns(stores.db, [newRun(a, 'u1', '2026-05-04'), newRun(b, 'u1', '2026-05-04', 'BLOCKED')]);

    expect(await dayRows('usage_daily', [a, b])).toEqual({ 'a/2026-05-04': 5, 'a/2026-05-05': 1, 'b/2026-05-04': 1 });
    expect(await dayRows('user_usage_daily', [a, b])).toEqual({
      'a/lone \ufffd half/2026-05-04': 1,
      'a/u1/2026-05-04': 3,
      'a/u1/2026-05-05': 1,
      'a/u2/2026-05-04': 1,
      'b/u1/2026-05-04': 1,
    });
    const { rows: users } = await stores.db.query<{
      k: string;
      run_count: number;
      first_seen_at: Date;
      last_seen_at: Date;
    }>(
      `SELECT (CASE WHEN workspace_id = $1 THEN 'a' ELSE 'b' END) || '/' || user_id AS k, run_count, first_seen_at, last_seen_at
       FROM sdk_users WHERE workspace_id = ANY($2) ORDER BY 1`,
      [a, [a, b]],
    );
    expect(users.map((u) => [u.k, Number(u.run_count)])).toEqual([
      ['a/lone \ufffd half', 1],
      ['a/u1', 4],
      ['a/u2', 1],
      ['a/u3', 0],
      ['b/u1', 1],
    ]);
    const u1 = users.find((u) => u.k === 'a/u1')!;
    expect([new Date(u1.first_seen_at).toISOString(), new Date(u1.last_seen_at).toISOString()]).toEqual([
      '2026-05-04T12:00:00.123Z',
      '2026-05-05T12:00:00.123Z',
    ]);

    const { rows: runs } = await stores.db.query<{
      id: string;
      status: string;
      ended_at: Date | null;
      metadata: unknown;
      decision: string;
    }>('SELECT id, status, ended_at, metadata, decision::text AS decision FROM runs WHERE workspace_id = ANY($1)', [
      [a, b],
    ]);
    expect(runs).toHaveLength(10);
    const blocked = runs.find((r) => r.id === first[3]!.id)!;
    expect(blocked).toMatchObject({ status: 'BLOCKED', metadata: { agent: 'batch', n: [1, 2] } });
    expect(new Date(blocked.ended_at!).toISOString()).toBe('2026-05-04T12:00:00.123Z');
    // The decision is json, not jsonb: its rules keep the order they were evaluated in.
    expect(runs.find((r) => r.id === first[0]!.id)!).toMatchObject({
      status: 'RUNNING',
      ended_at: null,
      decision: JSON.stringify(ALLOW),
    });
  });

  it('when a batch ends runs, then each end is answered by its own run: a run named twice ends once, by its first mention', async () => {
    const a = (await createWorkspace(stores.db, 'ends-a', 'enterprise')).id;
    const b = (await createWorkspace(stores.db, 'ends-b', 'enterprise')).id;
    const [r1, r2, r3, blocked, r4] = [
      newRun(a, 'u1', '2026-05-04'),
      newRun(a, 'u2', '2026-05-04'),
      newRun(b, 'u1', '2026-05-04'),
      newRun(a, 'u3', '2026-05-04', 'BLOCKED'),
      newRun(b, 'u4', '2026-05-04'),
    ];
    await insertRuns(stores.db, [r1, r2, r3, blocked, r4]);
    const missing = randomUUID();
    const ended = await endRuns(stores.db, [
      { workspaceId: a, runId: r1.id, status: 'FAILED', now: NOW },
      { workspaceId: a, runId: r2.id, status: 'COMPLETED', now: NOW },
      { workspaceId: a, runId: r1.id, status: 'COMPLETED', now: NOW },
      { workspaceId: a, runId: r3.id, status: 'COMPLETED', now: NOW },
      { workspaceId: a, runId: blocked.id, status: 'COMPLETED', now: NOW },
      { workspaceId: a, runId: missing, status: 'COMPLETED', now: NOW },
      // Named from another workspace first: that mention must not take the run's own end.
      { workspaceId: a, runId: r4.id, status: 'FAILED', now: NOW },
      { workspaceId: b, runId: r4.id, status: 'COMPLETED', now: NOW },
    ]);
    expect(ended.map((e) => e && { ...e, ended_at: new Date(e.ended_at).toISOString() })).toEqual([
      { id: r1.id, status: 'FAILED', user_id: 'u1', ended_at: NOW.toISOString() },
      { id: r2.id, status: 'COMPLETED', user_id: 'u2', ended_at: NOW.toISOString() },
      null,
      null,
      null,
      null,
      null,
      { id: r4.id, status: 'COMPLETED', user_id: 'u4', ended_at: NOW.toISOString() },
    ]);
    const { rows } = await stores.db.query<{ id: string; status: string }>(
      'SELECT id, status FROM runs WHERE id = ANY($1)',
      [[r1.id, r3.id, blocked.id]],
    );
    expect(Object.fromEntries(rows.map((r) => [r.id, r.status]))).toEqual({
      [r1.id]: 'FAILED',
      [r3.id]: 'RUNNING',
      [blocked.id]: 'BLOCKED',
    });
    // Ended again: no longer RUNNING.
    expect(await endRuns(stores.db, [{ workspaceId: a, runId: r2.id, status: 'FAILED', now: NOW }])).toEqual([null]);
  });

  it('when one start of a batch is refused by the database, then only that start fails and the others are counted', async () => {
    const ws = (await createWorkspace(stores.db, 'refused', 'enterprise')).id;
    const guard = new GuardService(stores.db, stores.counters, { now: () => NOW }, createLogger('silent'));
    // jsonb refuses a NUL character (the API's validation turns such bodies away before this).
    const starts = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) =>
        guard.startRun(ws, { user_id: `u${i % 3}`, metadata: i === 4 ? { x: 'a\u0000' } : { i } }),
      ),
    );
    expect(starts.map((s) => s.status)).toEqual([
      ...Array(4).fill('fulfilled'),
      'rejected',
      ...Array(5).fill('fulfilled'),
    ]);
    expect(await dayRows('usage_daily', [ws])).toEqual({ 'a/2026-05-04': 9 });
    const { rows } = await stores.db.query<{ n: string }>(
      'SELECT count(*)::text AS n FROM runs WHERE workspace_id = $1',
      [ws],
    );
    expect(rows[0]!.n).toBe('9');
  });

  it('when a proxied call starts a run of its own, then the run and its first step are one commit, and the next step takes 2 unread', async () => {
    const statements: string[] = [];
    const counting: Db = {
      ...stores.db,
      query: (sql, params) => (statements.push(sql), stores.db.query(sql, params)),
      transaction: (fn) =>
        stores.db.transaction((tx) => fn({ query: (sql, params) => (statements.push(sql), tx.query(sql, params)) })),
    };
    const step = { type: 'MODEL_CALL' as const, model: 'm', input_data: { provider: 'openai' } };
    for (const limits of [{}, { max_concurrent_runs: 10 }]) {
      const ws = (await createWorkspace(stores.db, 'first-step', 'enterprise')).id;
      // With a run limit, the start commits alone, under the workspace's admission lock.
      if ('max_concurrent_runs' in limits)
        await stores.db.query('UPDATE workspaces SET max_concurrent_runs = 10 WHERE id = $1', [ws]);
      const guard = new GuardService(counting, stores.counters, { now: () => NOW }, createLogger('silent'));
      statements.length = 0;
      const started = await Promise.all(
        Array.from({ length: 3 }, (_, i) => runWithStep(guard, ws, { user_id: `u${i}` }, step)),
      );
      // No step was written apart from its run (with a run limit too, inside the start's transaction).
      expect(statements.filter((sql) => /INSERT INTO runs/.test(sql)).length).toBeGreaterThan(0);
      expect(statements.filter((sql) => /INSERT INTO steps/.test(sql) && !/INSERT INTO runs/.test(sql))).toEqual([]);
      if ('max_concurrent_runs' in limits)
        expect(statements.some((sql) => sql.includes('pg_advisory_xact_lock'))).toBe(true);
      for (const { run, step: first } of started) {
        expect(run).toMatchObject({ status: 'RUNNING', decision: { outcome: 'ALLOW' } });
        expect(first).toMatchObject({
          run_id: run.id,
          sequence: 1,
          status: 'ALLOWED',
          decision: { outcome: 'ALLOW', reason: null },
        });
        expect(Object.keys(first!.decision.evaluated_rules)).toEqual([
          'kill_switch',
          'user_blocked',
          'workspace_daily_budget',
          'user_daily_budget',
        ]);
      }
      const { rows } = await stores.db.query<{ run_id: string; sequence: number; status: string; input_data: unknown }>(
        'SELECT run_id, sequence, status, input_json AS input_data FROM steps WHERE workspace_id = $1',
        [ws],
      );
      expect(
        rows.map((r) => ({ ...r, sequence: Number(r.sequence) })).sort((a, b) => a.run_id.localeCompare(b.run_id)),
      ).toEqual(
        started
          .map(({ run }) => ({ run_id: run.id, sequence: 1, status: 'ALLOWED', input_data: { provider: 'openai' } }))
          .sort((a, b) => a.run_id.localeCompare(b.run_id)),
      );
      expect(await dayRows('usage_daily', [ws])).toEqual({ 'a/2026-05-04': 3 });
      // The daemon knows the run's highest sequence: the next proxied step takes 2 without a read.
      const next = await guard.createStep(ws, started[0]!.run.id, step);
      expect(next.sequence).toBe(2);
      expect(statements.some((sql) => sql.includes('max(sequence)'))).toBe(false);
    }

    // A blocked start writes no step.
    const ws = (await createWorkspace(stores.db, 'first-step-blocked', 'enterprise')).id;
    await stores.db.query('UPDATE workspaces SET kill_switch_active = true WHERE id = $1', [ws]);
    const guard = new GuardService(stores.db, stores.counters, { now: () => NOW }, createLogger('silent'));
    const blocked = await runWithStep(guard, ws, { user_id: 'u' }, step);
    expect(blocked).toMatchObject({
      run: { status: 'BLOCKED', decision: { reason: 'KILL_SWITCH_ACTIVE' } },
      step: null,
    });
    const { rows } = await stores.db.query('SELECT 1 FROM steps WHERE workspace_id = $1', [ws]);
    expect(rows).toEqual([]);
  });

  it.runIf(backend !== 'embedded')(
    'when batches of run ends race batches of step inserts over the same runs, then no statement deadlocks',
    async () => {
      const ws = (await createWorkspace(stores.db, 'race', 'enterprise')).id;
      // Every statement's failure is seen here: the services retry a deadlock's victim, so answers alone would hide it.
      const failures: string[] = [];
      const watched: Db = {
        kind: stores.db.kind,
        query: (sql, params) =>
          stores.db.query(sql, params).catch((error: { code?: string }) => {
            failures.push(error.code ?? String(error));
            throw error;
          }),
        exec: (sql) => stores.db.exec(sql),
        transaction: (fn) => stores.db.transaction(fn),
        close: () => stores.db.close(),
      };
      const shuffled = <T>(items: T[]) =>
        items
          .map((x) => [Math.random(), x] as const)
          .sort((p, q) => p[0] - q[0])
          .map((p) => p[1]);
      const ROUNDS = 4;
      const RUNS = 150;
      let endedCount = 0;
      let inserted = 0;
      for (let round = 0; round < ROUNDS; round++) {
        const runs = Array.from({ length: RUNS }, (_, i) => newRun(ws, `u${i % 7}`, '2026-05-04'));
        await insertRuns(watched, runs);
        const ids = runs.map((r) => r.id);
        const ender = async () => {
          const order = shuffled(ids);
          for (let i = 0; i < order.length; i += 15) {
            const answers = await endRuns(
              watched,
              order
                .slice(i, i + 15)
                .map((runId) => ({ workspaceId: ws, runId, status: 'COMPLETED' as const, now: NOW })),
            );
            endedCount += answers.filter(Boolean).length;
          }
        };
        const inserter = async (worker: number) => {
          for (let k = 0; k < 12; k++) {
            const batch = shuffled(ids)
              .slice(0, 40)
              .map((runId) => ({
                id: randomUUID(),
                runId,
                workspaceId: ws,
                sequence: 1000 * worker + k + 1,
                type: 'MODEL_CALL' as const,
                status: 'ALLOWED' as const,
                model: 'm',
                toolName: null,
                inputData: null,
                decision: ALLOW,
                now: NOW,
              }));
            const outcomes = await insertSteps(watched, batch);
            inserted += outcomes.filter((o) => o === 'inserted').length;
          }
        };
        await Promise.all([ender(), ender(), inserter(1), inserter(2), inserter(3)]);
      }
      expect(failures).toEqual([]);
      expect(endedCount).toBe(ROUNDS * RUNS);
      // The race was real: steps went into runs that the enders were ending meanwhile.
      expect(inserted).toBeGreaterThan(0);
      const { rows } = await stores.db.query<{ n: string }>(
        'SELECT count(*)::text AS n FROM steps WHERE workspace_id = $1',
        [ws],
      );
      expect(Number(rows[0]!.n)).toBe(inserted);
    },
  );
});
