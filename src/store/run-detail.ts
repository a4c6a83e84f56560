/**
 * A run with its steps, as the JSON bytes of its answer (`RunDetail`), written by Postgres: one
 * statement for the run and its first page of steps, then, for a large run, one statement a later
 * page, each read when the client has taken the one before (see DETAIL_PAGES).
 */
import type { Queryable } from './db.js';
import { RUN_TOTALS } from './run-list.js';

/**
 * How a run detail reads its steps. A run of up to `first` steps is one statement and one answer.
 * A larger one is sent as it is read, `later` steps a statement, each page read when the client
 * has taken the one before: whole, a 400,000-step run (216 MB of JSON) took the daemon to 1.1 GB.
 */
export const DETAIL_PAGES = { first: 1_000, later: 100 } as const;

/** A run detail's answer: its UTF-8 bytes, or pieces of them to send in turn. */
export type RunDetailBody = Buffer[] | AsyncIterable<Buffer>;

/**
 * A timestamptz as `Date.prototype.toISOString` writes it (both cut to the millisecond) for years
 * 1 to 9999, a JSON string; NULL stays NULL, and so does an infinite date (`to_char` has no text
 * for it).
 */
const isoJson = (column: string) =>
  `'"' || to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"'`;
/** A numeric as a JSON number, exact (`trim_scale` drops trailing zeros); what has none (NaN, an infinity) is NULL. */
const exactNumber = (column: string) =>
  `to_json(trim_scale(CASE WHEN ${column} NOT IN ('NaN', 'Infinity', '-Infinity') THEN ${column} END))::text`;
/** A value's JSON text, or `null`: `concat` would drop a NULL piece. */
const orNull = (json: string) => `coalesce(${json}, 'null')`;
const text = (column: string) => orNull(`to_json(${column})::text`);
const integer = (column: string) => orNull(`${column}::text`);

/**
 * A step `s` as JSON text, in the `Step` schema's key order. Caller data is in the json columns,
 * or in the jsonb ones for steps written before migration 5. `cached_prompt_tokens` is the older
 * name of `cache_read_tokens` (one column), kept for clients that read it.
 */
const STEP_JSON = `concat('{"id":"', s.id,
  '","type":', to_json(s.type),
  ',"status":', to_json(s.status),
  ',"sequence":', s.sequence,
  ',"model":', ${text('s.model')},
  ',"tool_name":', ${text('s.tool_name')},
  ',"mcp":', coalesce(s.mcp::text, 'null'),
  ',"prompt_tokens":', ${integer('s.prompt_tokens')},
  ',"completion_tokens":', ${integer('s.completion_tokens')},
  ',"cached_prompt_tokens":', ${integer('s.cached_prompt_tokens')},
  ',"cache_read_tokens":', ${integer('s.cached_prompt_tokens')},
  ',"cache_write_tokens":', ${integer('s.cache_write_tokens')},
  ',"reasoning_tokens":', ${integer('s.reasoning_tokens')},
  ',"cost_usd":', ${orNull(exactNumber('s.cost_usd'))},
  ',"duration_ms":', ${integer('s.duration_ms')},
  ',"input_data":', coalesce(s.input_json::text, s.input_data::text, 'null'),
  ',"output_data":', coalesce(s.output_json::text, s.output_data::text, 'null'),
  ',"decision":', coalesce(s.decision::text, 'null'),
  ',"created_at":', ${orNull(isoJson('s.created_at'))},
  '}')`;

/** Up to `$limit` steps of run `$run` past the sequence `$after` and up to `$until`: their JSON joined by commas, and the last one's sequence. */
const stepPage = (run: string, after: string, until: string, limit: string) => `SELECT
    string_agg(${STEP_JSON}, ',' ORDER BY s.sequence) AS json, max(s.sequence) AS last
  FROM (SELECT * FROM steps WHERE run_id = ${run} AND sequence > ${after} AND sequence <= ${until}
        ORDER BY sequence LIMIT ${limit}) s`;

/**
 * The run's JSON up to its steps (`head`), in the `RunDetail` schema's key order; the first page
 * of its steps; and its highest sequence. The run's fields as `runSummary` writes them, but
 * exact: the total cost as numeric writes it, metadata as jsonb writes it. `duration_ms` is to
 * `$3` while the run is RUNNING (the daemon's clock), each end cut to the millisecond as a
 * JavaScript date is; null, as the dates, where one is infinite (none is written by the daemon).
 * One statement, so one snapshot: the steps and the highest sequence agree.
 */
const FIRST_PAGE = (() => {
  const ms = (instant: string) => `floor(extract(epoch FROM ${instant}) * 1000)`;
  const end = `coalesce(r.ended_at, $3::timestamptz)`;
  // Below every integer sequence: the first page starts at the lowest.
  const page = stepPage('r.id', '-2147483649', 'last.sequence', '$4');
  return `SELECT
    concat('{"id":"', r.id,
      '","user_id":', to_json(r.user_id),
      ',"status":', to_json(r.status),
      ',"started_at":', ${orNull(isoJson('r.started_at'))},
      ',"ended_at":', ${orNull(isoJson('r.ended_at'))},
      ',"step_count":', t.step_count,
      ',"total_tokens":', t.total_tokens,
      ',"total_cost_usd":', ${orNull(exactNumber('t.total_cost_usd'))},
      ',"tags":', r.tags::text,
      ',"metadata":', coalesce(r.metadata::text, 'null'),
      ',"decision":{"outcome":', coalesce((r.decision -> 'outcome')::text, 'null'),
      ',"reason":', coalesce((r.decision -> 'reason')::text, 'null'),
      ',"evaluated_rules":', coalesce((r.decision -> 'evaluated_rules')::text, 'null'),
      CASE WHEN r.decision -> 'detail' IS NOT NULL THEN ',"detail":' || (r.decision -> 'detail')::text END,
      '},"limits":{"max_steps":', coalesce(r.max_steps::text, 'null'),
      ',"max_cost_usd":', coalesce(to_json(trim_scale(r.max_cost_micros / 1000000.0))::text, 'null'),
      ',"max_identical_calls":', coalesce(r.max_identical_calls::text, 'null'),
      '},"duration_ms":', coalesce((CASE WHEN isfinite(r.started_at) AND isfinite(${end})
        THEN greatest(0, ${ms(end)} - ${ms('r.started_at')})::bigint END)::text, 'null'),
      ',"steps":[') AS head,
    last.sequence AS last_sequence, first.json, first.last
  FROM runs r ${RUN_TOTALS}
    CROSS JOIN LATERAL (SELECT coalesce(max(sequence), 0) AS sequence FROM steps WHERE run_id = r.id) last
    CROSS JOIN LATERAL (${page}) first
  WHERE r.id = $1 AND r.workspace_id = $2`;
})();
const LATER_PAGE = stepPage('$1', '$2', '$3', '$4');

interface Page {
  json: string | null;
  last: number | null;
}

const CLOSE = ']}';

/**
 * A run with its steps, as the answer's JSON bytes; null when the workspace has no such run. A
 * run of more than `pages.first` steps comes as pieces to send in turn. Its later pages list the
 * steps up to the highest sequence the first statement saw, each as it is when its page is read:
 * a run being written to can show a later step's result than its totals count. Those pages run
 * on `db` after this returns: give it the pool, not a transaction (which would have ended by then).
 */
export async function readRunDetail(
  db: Queryable,
  workspaceId: string,
  runId: string,
  now: Date,
  pages: { first: number; later: number } = DETAIL_PAGES,
): Promise<RunDetailBody | null> {
  const { rows } = await db.query<{ head: string; last_sequence: number } & Page>(FIRST_PAGE, [
    runId,
    workspaceId,
    now.toISOString(),
    Math.trunc(pages.first),
  ]);
  const run = rows[0];
  if (!run) return null;
  const opened = run.head + (run.json ?? '');
  // Whole when the first page reached the highest sequence (one snapshot: a page not full did).
  if (run.last === null || run.last >= run.last_sequence) return [Buffer.from(opened + CLOSE)];
  return laterPages(db, runId, opened, { after: run.last, until: run.last_sequence }, pages.later);
}

async function* laterPages(
  db: Queryable,
  runId: string,
  opened: string,
  range: { after: number; until: number },
  pageSteps: number,
) {
  yield Buffer.from(opened);
  for (let after = range.after; after < range.until;) {
    const { rows } = await db.query<Page>(LATER_PAGE, [runId, after, range.until, Math.trunc(pageSteps)]);
    const page = rows[0];
    if (!page || page.last === null || page.json === null) break;
    yield Buffer.from(`,${page.json}`);
    after = page.last;
  }
  yield Buffer.from(CLOSE);
}
