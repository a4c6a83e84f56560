/**
 * What owning a proxied call costs its step writes (crash recovery, docs/budgets.md): the step
 * insert carries the daemon's id, and the partial index `steps_in_flight_by_daemon` holds an entry
 * while the call is in flight. Against a fresh Postgres database, the same batches of step
 * inserts and finishes are timed, alternating, in three ways: no owner (an API step: the column
 * is NULL, no index entry), an owner without the index, and an owner with the index.
 *
 *   npx tsx bench/step-owner-cost.ts [--rounds 20] [--batches 200] [--batch 8]
 */
import { parseArgs } from 'node:util';
import { createServices } from './lib/database.js';
import { summarize, round } from './lib/stats.js';
import { postgresDb } from '../src/store/db.js';
import { migrate } from '../src/store/migrations.js';
import { insertRuns, insertSteps, type NewStep } from '../src/store/runs.js';
import { finishSteps } from '../src/store/step-finish.js';
import { timeOrderedId } from '../src/store/time-ordered-id.js';
import { buildLateIndexesNow } from '../src/store/late-indexes.js';

const { values: flags } = parseArgs({
  options: {
    rounds: { type: 'string', default: '20' },
    batches: { type: 'string', default: '200' },
    batch: { type: 'string', default: '8' },
  },
});
const [rounds, batches, batchSize] = [flags.rounds, flags.batches, flags.batch].map(Number) as [number, number, number];

const services = await createServices();
const db = postgresDb({ connectionString: services.databaseUrl, max: 2 });
const INDEX = 'steps_in_flight_by_daemon';
try {
  await migrate(db);
  await buildLateIndexesNow(db);
  const workspaceId = timeOrderedId(Date.now());
  await db.query(`INSERT INTO workspaces (id, name, plan) VALUES ($1, 'bench', 'enterprise')`, [workspaceId]);
  const decision = { outcome: 'ALLOW', reason: null, evaluated_rules: {} } as never;
  const now = new Date();
  const runIds = Array.from({ length: batchSize }, () => timeOrderedId(Date.now()));
  await insertRuns(
    db,
    runIds.map((id) => ({
      id,
      workspaceId,
      userId: 'u',
      status: 'RUNNING',
      metadata: null,
      decision,
      now,
      day: '2026-11-26',
    })),
  );
  const sequences = new Map(runIds.map((id) => [id, 0]));

  const ways = {
    'no owner (API step)': { daemonId: null, index: true },
    'owner, no index': { daemonId: 1, index: false },
    'owner and index': { daemonId: 1, index: true },
  } as const;
  const samples = Object.fromEntries(
    Object.keys(ways).map((w) => [w, { insert: [] as number[], finish: [] as number[] }]),
  );

  for (let round = 0; round < rounds; round++) {
    for (const [way, { daemonId, index }] of Object.entries(ways)) {
      if (index)
        await db.exec(
          `CREATE INDEX IF NOT EXISTS ${INDEX} ON steps (daemon_id) WHERE status = 'ALLOWED' AND daemon_id IS NOT NULL`,
        );
      else await db.exec(`DROP INDEX IF EXISTS ${INDEX}`);
      for (let b = 0; b < batches; b++) {
        const steps: NewStep[] = runIds.map((runId) => {
          const sequence = sequences.get(runId)! + 1;
          sequences.set(runId, sequence);
          return {
            id: timeOrderedId(Date.now()),
            runId,
            workspaceId,
            sequence,
            type: 'MODEL_CALL',
            status: 'ALLOWED',
            model: 'gpt-4o-mini',
            toolName: null,
            inputData: { provider: 'openai', method: 'POST', path: '/v1/chat/completions' },
            decision,
            now,
            daemonId,
          };
        });
        let started = performance.now();
        await insertSteps(db, steps);
        samples[way]!.insert.push(performance.now() - started);
        started = performance.now();
        await finishSteps(
          db,
          steps.map((s) => ({
            workspaceId,
            runId: s.runId,
            stepId: s.id,
            now,
            day: '2026-11-26',
            result: { status: 'COMPLETED', durationMs: 5, promptTokens: 10, completionTokens: 5 },
          })),
        );
        samples[way]!.finish.push(performance.now() - started);
      }
    }
  }
  const table = Object.entries(samples).map(([way, { insert, finish }]) => {
    const [i, f] = [summarize(insert), summarize(finish)];
    return {
      way,
      insertMeanMs: round(i.mean, 3),
      insertP50Ms: round(i.p50, 3),
      finishMeanMs: round(f.mean, 3),
      finishP50Ms: round(f.p50, 3),
    };
  });
  console.log(`${rounds} rounds x ${batches} batches of ${batchSize} steps each way, alternating`);
  console.table(table);
} finally {
  await db.close();
  await services.drop();
}
