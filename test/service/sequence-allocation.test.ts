/**
 * Server-assigned step sequences (proxied calls) against real stores: parallel calls in one run,
 * from two services standing for two daemons, mixed with sequences a client chose, each get a
 * distinct sequence and every step is recorded; an ended run takes no more steps; a run this
 * daemon started needs no read of its highest sequence.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { systemClock } from '../../src/clock.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { SequenceAllocator } from '../../src/guard/sequence-allocator.js';
import type { Db } from '../../src/store/db.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { openTestStores, type Backend, type TestStores } from '../support/harness.js';
import { runWithStep } from '../support/run-with-step.js';

const log = createLogger('silent');

describe.each<Backend>(['postgres+sql', 'embedded'])('step sequences on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when two daemons and a client add steps to one run at once, then every step lands with its own sequence', async () => {
    const ws = await createWorkspace(stores.db, 'seq', 'enterprise');
    const [a, b] = [0, 1].map(() => new GuardService(stores.db, stores.counters, systemClock, log));
    const run = await a!.startRun(ws.id, { user_id: 'u' });
    const proxied = (guard: GuardService) => guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', model: 'm' });
    for (const sequence of [1, 2, 3])
      await a!.createStep(ws.id, run.id, { type: 'TOOL_CALL', sequence, tool_name: 't' });
    // A client's own sequence, written while the daemons allocate theirs.
    const chosen = a!.createStep(ws.id, run.id, { type: 'TOOL_CALL', sequence: 1000, tool_name: 't' });
    const answers = await Promise.all([chosen, ...Array.from({ length: 20 }, (_, i) => proxied(i % 2 ? a! : b!))]);

    const sequences = answers.map((s) => s.sequence);
    expect(sequences[0]).toBe(1000);
    expect(new Set(sequences).size).toBe(21);
    expect(sequences.slice(1).every((n) => n > 3)).toBe(true);
    const { rows } = await stores.db.query<{ sequence: number }>('SELECT sequence FROM steps WHERE run_id = $1', [
      run.id,
    ]);
    expect(rows.map((r) => Number(r.sequence)).sort((x, y) => x - y)).toEqual(
      [1, 2, 3, ...sequences].sort((x, y) => x - y),
    );

    // The daemon that recorded the client's 1000 allocates past it.
    const next = (await proxied(a!)).sequence;
    expect(next).toBeGreaterThan(1000);
    expect(sequences).not.toContain(next);
  });

  it("when this daemon started the run with a proxied call, then its next steps take 2, 3, ... without reading the run's steps", async () => {
    const ws = await createWorkspace(stores.db, 'seq-own', 'enterprise');
    const reads: string[] = [];
    const watched: Db = {
      ...stores.db,
      query: (sql, params) => {
        if (sql.includes('max(sequence)')) reads.push(String(params?.[0]));
        return stores.db.query(sql, params);
      },
    };
    const guard = new GuardService(watched, stores.counters, systemClock, log);
    const other = new GuardService(watched, stores.counters, systemClock, log);
    const { run, step: first } = await runWithStep(guard, ws.id, { user_id: 'u' }, { type: 'MODEL_CALL', model: 'm' });
    expect(first?.sequence).toBe(1);
    const steps = await Promise.all(
      Array.from({ length: 3 }, () => guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', model: 'm' })),
    );
    expect(steps.map((s) => s.sequence).sort()).toEqual([2, 3, 4]);
    expect(reads).toEqual([]);
    // Another daemon did not start it: it reads the highest once.
    expect((await other.createStep(ws.id, run.id, { type: 'MODEL_CALL', model: 'm' })).sequence).toBe(5);
    expect(reads).toEqual([run.id]);
    // A run started without a step (the API's) is read once, as before.
    const plain = await guard.startRun(ws.id, { user_id: 'u' });
    expect((await guard.createStep(ws.id, plain.id, { type: 'MODEL_CALL', model: 'm' })).sequence).toBe(1);
    expect(reads).toEqual([run.id, plain.id]);
  });

  it('when the run has ended, then a proxied step is refused and nothing is recorded', async () => {
    const ws = await createWorkspace(stores.db, 'seq-ended', 'enterprise');
    const runReads: string[] = [];
    const watched: Db = {
      ...stores.db,
      query: (sql, params) => {
        if (sql.includes('run_status')) runReads.push(String(params?.[0]));
        return stores.db.query(sql, params);
      },
    };
    const guard = new GuardService(watched, stores.counters, systemClock, log);
    const run = await guard.startRun(ws.id, { user_id: 'u' });
    await guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', model: 'm' });
    expect(runReads).toEqual([]); // started here: its user is known
    await guard.endRun(ws.id, run.id, 'COMPLETED');
    await expect(guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', model: 'm' })).rejects.toMatchObject({
      code: 'RUN_NOT_RUNNING',
    });
    // Ended, it is no longer kept (a daemon that ends many runs would hold them all): read again.
    expect(runReads).toEqual([run.id]);
    const { rows } = await stores.db.query('SELECT 1 FROM steps WHERE run_id = $1', [run.id]);
    expect(rows).toHaveLength(1);
  });

  it('when steps race the end of their run, then each either lands before the end or is refused', async () => {
    const ws = await createWorkspace(stores.db, 'seq-race', 'enterprise');
    const guard = new GuardService(stores.db, stores.counters, systemClock, log);
    const run = await guard.startRun(ws.id, { user_id: 'u' });
    const steps = Array.from({ length: 20 }, () =>
      guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', model: 'm' }).then(
        (s) => s.id,
        (error: { code?: string }) => error.code,
      ),
    );
    const ended = guard.endRun(ws.id, run.id, 'COMPLETED');
    const outcomes = await Promise.all(steps);
    expect((await ended).status).toBe('COMPLETED');
    expect(outcomes.filter((o) => o !== undefined && o.length !== 36).every((o) => o === 'RUN_NOT_RUNNING')).toBe(true);
    const { rows } = await stores.db.query<{ id: string }>('SELECT id FROM steps WHERE run_id = $1', [run.id]);
    expect(rows.map((r) => r.id).sort()).toEqual(outcomes.filter((o) => o?.length === 36).sort());
  });
});

describe('sequence allocator', () => {
  it('when a run was started here, then it counts from 1 with no read; once ended, it is forgotten and read again', async () => {
    const reads: string[] = [];
    const allocator = new SequenceAllocator(async (runId) => (reads.push(runId), 7));
    allocator.started('r', 0);
    expect([allocator.next('r'), await allocator.allocate('r')]).toEqual([1, 2]);
    expect(reads).toEqual([]);
    allocator.ended('r');
    expect(allocator.next('r')).toBeUndefined();
    expect(await allocator.allocate('r')).toBe(8);
    expect(reads).toEqual(['r']);
  });
});
