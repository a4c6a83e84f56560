/**
 * Where a run detail read spends its time: seeds one run of 1,000 steps (proxy-like audit data)
 * in the database of DATABASE_URL, then times the statement alone (EXPLAIN ANALYZE and the wire
 * without type parsing), pg's parsing, the store function, and the whole route through inject
 * and over HTTP.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/detaildb npx tsx bench/detail-profile.ts
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { buildApp } from '../src/api/app.js';
import { createLogger } from '../src/logger.js';
import { postgresDb } from '../src/store/db.js';
import { migrate } from '../src/store/migrations.js';
import { DETAIL_PAGES, readRunDetail } from '../src/store/run-detail.js';
import { SqlCounters } from '../src/store/counters/sql-counters.js';
import { createApiKey, createWorkspace } from '../src/store/workspaces.js';
import { RUN_ALLOWED, STEP_ALLOWED } from './lib/seed-decisions.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/detaildb';
const STEPS = Number(process.env.STEPS ?? 1000);
const N = Number(process.env.N ?? 200);

async function seed(db: pg.Client, workspaceId: string): Promise<string> {
  const id = randomUUID();
  await db.query(
    `INSERT INTO runs (id, workspace_id, user_id, status, metadata, decision, started_at, ended_at, step_count)
     VALUES ($1, $2, 'detail-user', 'COMPLETED', '{"agent":"support-bot","env":"prod"}', $3::json,
       now() - interval '1 hour', now() - interval '30 minutes', $4)`,
    [id, workspaceId, RUN_ALLOWED, STEPS],
  );
  // Proxy-like rows: an audit summary in, the call's outcome out; every third a tool call.
  await db.query(
    `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, model, tool_name, prompt_tokens, completion_tokens,
                        cached_prompt_tokens, cost_usd, duration_ms, input_json, output_json, decision, created_at, finished_at)
     SELECT gen_random_uuid(), $1, $2, s,
       CASE WHEN s % 3 = 0 THEN 'TOOL_CALL' ELSE 'MODEL_CALL' END, 'COMPLETED',
       CASE WHEN s % 3 = 0 THEN NULL ELSE 'gpt-4o-mini-2024-07-18' END,
       CASE WHEN s % 3 = 0 THEN 'search_tickets' END,
       CASE WHEN s % 3 = 0 THEN NULL ELSE 200 + (s * 131) % 1800 END,
       CASE WHEN s % 3 = 0 THEN NULL ELSE 20 + (s * 53) % 400 END,
       CASE WHEN s % 3 = 0 THEN NULL ELSE (s * 17) % 512 END,
       CASE WHEN s % 3 = 0 THEN NULL ELSE (200 + (s * 131) % 1800) * 0.00000015 + (20 + (s * 53) % 400) * 0.0000006 END,
       300 + (s * 97) % 2500,
       -- jsonb's text, spaces and all: the bytes of earlier runs of this profile.
       (CASE WHEN s % 3 = 0 THEN jsonb_build_object('query', 'tickets about refund #' || s, 'limit', 20)
       ELSE jsonb_build_object('provider', 'openai', 'method', 'POST', 'path', '/v1/chat/completions',
         'model', 'gpt-4o-mini', 'stream', s % 2 = 0, 'body_bytes', 1000 + s * 37, 'messages', 2 + s % 30,
         'max_tokens', 1024, 'tools', 3, 'usage_requested', true,
         'prompt_excerpt', 'Customer says: "my order #' || s || E' never arrived"\\nPlease summarize the ticket and propose a refund or a replacement.')
       END)::text::json,
       (CASE WHEN s % 3 = 0 THEN jsonb_build_object('results', 7, 'took_ms', 42)
       ELSE jsonb_build_object('http_status', 200, 'finish_reason', 'stop', 'stream', s % 2 = 0, 'response_bytes', 2000 + s) END)::text::json,
       $3::json,
       now() - interval '1 hour' + s * interval '1.234567 second', now() - interval '1 hour' + s * interval '1.5 second'
     FROM generate_series(1, $4::int) s`,
    [id, workspaceId, STEP_ALLOWED, STEPS],
  );
  // The run's totals, as the daemon keeps them with its steps' writes.
  await db.query(
    `INSERT INTO run_totals (run_id, total_tokens, total_cost_usd)
     SELECT run_id, sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)), coalesce(sum(cost_usd), 0) FROM steps WHERE run_id = $1 GROUP BY run_id`,
    [id],
  );
  await db.query('ANALYZE');
  return id;
}

function pct(samples: number[]) {
  const s = [...samples].sort((a, b) => a - b);
  const at = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  return `p50 ${at(0.5).toFixed(2)} ms, p99 ${at(0.99).toFixed(2)} ms`;
}

async function time(label: string, fn: () => unknown) {
  for (let i = 0; i < 20; i++) await fn();
  const samples: number[] = [];
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    await fn();
    samples.push(performance.now() - t0);
  }
  console.log(`${label.padEnd(44)} ${pct(samples)}`);
}

const client = new pg.Client({ connectionString: url });
await client.connect();
const db = postgresDb({ connectionString: url, max: 4 });
await migrate(db);
// RUN_ID: read a run seeded earlier (to compare answers before and after a change).
const existing = process.env.RUN_ID
  ? (await client.query<{ workspace_id: string }>('SELECT workspace_id FROM runs WHERE id = $1', [process.env.RUN_ID]))
      .rows[0]
  : undefined;
const ws = existing ? { id: existing.workspace_id } : await createWorkspace(db, 'profile', 'scale');
const key = await createApiKey(db, ws.id);
const runId = process.env.RUN_ID ?? (await seed(client, ws.id));

const detailSql = process.env.DETAIL_SQL;
if (detailSql) {
  const plan = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS) ${detailSql}`, [runId, ws.id]);
  console.log(plan.rows.map((r) => r['QUERY PLAN']).join('\n'));
}

const raw = { getTypeParser: () => (v: string) => v };
const app = await buildApp({
  db,
  counters: new SqlCounters(db),
  clock: { now: () => new Date() },
  logger: createLogger('silent'),
  version: 'profile',
  bodyLimitBytes: 1 << 20,
  auth: { jwtSecret: 'x'.repeat(40), jwtTtlSeconds: 3600, scryptCost: 1024, rateLimitPerMinute: 1000 },
  metrics: false,
});
const body = await readRunDetail(db, ws.id, runId, new Date());
// One page: its bytes; more pages come as a stream.
const text = Array.isArray(body) ? Buffer.concat(body).toString('utf8') : null;
if (text === null)
  throw new Error(`the run has more than one page of steps: set STEPS to ${DETAIL_PAGES.first} or fewer`);
console.log(
  `steps ${(JSON.parse(text) as { steps: unknown[] }).steps.length}, response ${Buffer.byteLength(text)} bytes`,
);

if (detailSql) {
  await time('statement, values left as text', () =>
    client.query({ text: detailSql, values: [runId, ws.id], types: raw }),
  );
  await time('statement, pg parses the values', () => client.query({ text: detailSql, values: [runId, ws.id] }));
}
await time('readRunDetail (statement + answer bytes)', () => readRunDetail(db, ws.id, runId, new Date()));
const headers = { authorization: `Bearer ${key.apiKey}` };
await time('inject GET /v1/runs/:id (whole route)', () =>
  app.inject({ method: 'GET', url: `/v1/runs/${runId}`, headers }),
);
await app.listen({ host: '127.0.0.1', port: 0 });
const base = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
await time('HTTP GET /v1/runs/:id (fetch, body read)', async () =>
  (await fetch(`${base}/v1/runs/${runId}`, { headers })).text(),
);
const viaHttp = await (await fetch(`${base}/v1/runs/${runId}`, { headers })).text();
if (process.env.DUMP)
  (await import('node:fs')).writeFileSync(
    process.env.DUMP,
    viaHttp.replace(/"duration_ms":\d+,"steps"/, '"duration_ms":0,"steps"'),
  );
console.log(`run id ${runId}`);
await app.close();
await db.close();
await client.end();
