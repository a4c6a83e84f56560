/**
 * What keeping a run's models (migration 18) costs the step insert, the hottest write: batches
 * of step inserts through `insertSteps`, as the group commit sends them, timed one statement at
 * a time against a fresh Postgres database. Three shapes: one step (an SDK call on its own), a
 * batch of 16 steps in 16 runs that all name a model their run already has (the common case: the
 * update is one containment test), and a batch of 16 that each name a model new to their run.
 *
 *   npx tsx bench/step-insert-models.ts [--batches 2000] [--baseline <dir>]
 *
 * With `--baseline <dir>` (a checkout of an earlier commit, e.g. `git worktree add /tmp/base <commit>`
 * with its node_modules), that checkout's statements are timed too, alternately with this one's.
 */
import { randomUUID } from 'node:crypto';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type { Decision } from '../src/rules/engine.js';
import { postgresDb } from '../src/store/db.js';
import { migrate } from '../src/store/migrations.js';
import * as thisStore from '../src/store/runs.js';
import type { NewStep } from '../src/store/runs.js';
import { createWorkspace } from '../src/store/workspaces.js';
import { createServices } from './lib/database.js';
import { summarize } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: { batches: { type: 'string', default: '2000' }, baseline: { type: 'string' } },
});
const batches = Number(flags.batches);
const ALLOW: Decision = { outcome: 'ALLOW', reason: null, evaluated_rules: {} };
const RUNS = 16;
const WARM_UP = 50;

type Store = Pick<typeof thisStore, 'insertRuns' | 'insertSteps'>;
const stores: [string, Store][] = [['this checkout', thisStore]];
// Another checkout's statements, run on this checkout's schema (an older insert ignores the
// models column), alternated with this one's round by round so the machine's noise hits both.
if (flags.baseline)
  stores.push([
    'baseline',
    (await import(pathToFileURL(join(resolve(flags.baseline), 'src/store/runs.ts')).href)) as Store,
  ]);

const services = await createServices();
// Commits without waiting for the disk: the statement's own work is measured, not fsync's queue.
const db = postgresDb({ connectionString: `${services.databaseUrl}?options=-c%20synchronous_commit%3Doff`, max: 2 });
try {
  await migrate(db);
  const workspaceId = (await createWorkspace(db, 'bench', 'enterprise')).id;
  const now = new Date();
  const day = now.toISOString().slice(0, 10);
  const sequences = new Map<string, number>();
  const step = (runId: string, model: string): NewStep => {
    const sequence = (sequences.get(runId) ?? 0) + 1;
    sequences.set(runId, sequence);
    return {
      id: randomUUID(),
      runId,
      workspaceId,
      sequence,
      type: 'MODEL_CALL',
      status: 'ALLOWED',
      model,
      toolName: null,
      inputData: { prompt: 'Summarize ticket 42' },
      decision: ALLOW,
      now,
    };
  };
  const shapes: Record<string, (runIds: string[], round: number) => NewStep[]> = {
    'one step, known model': (runIds) => [step(runIds[0]!, 'gpt-4o-mini')],
    '16 steps in 16 runs, known models': (runIds) => runIds.map((id) => step(id, 'gpt-4o-mini')),
    // A new name every time: past 16 the run keeps no more, and each update still computes that.
    '16 steps in 16 runs, new models': (runIds, round) => runIds.map((id) => step(id, `model-${round}`)),
  };
  for (const [name, makeBatch] of Object.entries(shapes)) {
    const timed = await Promise.all(
      stores.map(async ([, store]) => {
        const runIds = Array.from({ length: RUNS }, () => randomUUID());
        await store.insertRuns(
          db,
          runIds.map((id) => ({
            id,
            workspaceId,
            userId: 'bench',
            status: 'RUNNING',
            metadata: null,
            decision: ALLOW,
            now,
            day,
          })),
        );
        return { store, runIds, ms: [] as number[] };
      }),
    );
    for (let round = 0; round < batches + WARM_UP; round++) {
      for (const variant of round % 2 ? [...timed].reverse() : timed) {
        const batch = makeBatch(variant.runIds, round);
        const started = performance.now();
        await variant.store.insertSteps(db, batch);
        if (round >= WARM_UP) variant.ms.push(performance.now() - started);
      }
    }
    for (const [i, [label]] of stores.entries()) {
      const s = summarize(timed[i]!.ms);
      console.log(
        `${name} (${label}): mean ${s.mean.toFixed(3)} ms, p50 ${s.p50.toFixed(3)} ms, p99 ${s.p99.toFixed(3)} ms (${batches} statements)`,
      );
    }
  }
} finally {
  await db.close();
  await services.drop();
}
