/**
 * Versioned schema migrations, applied in order at start. Kept as code (not .sql files) so the
 * built package carries them. Never edit a released migration: add the next one.
 */
import { ADVISORY_LOCKS } from './advisory-locks.js';
import type { Db, Queryable } from './db.js';

interface Migration {
  version: number;
  name: string;
  sql: string;
}

const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'core',
    sql: `
CREATE TABLE workspaces (
  id uuid PRIMARY KEY,
  name text NOT NULL,
  plan text NOT NULL,
  kill_switch_active boolean NOT NULL DEFAULT false,
  daily_budget_micros bigint,
  user_daily_budget_micros bigint,
  monthly_run_limit integer,
  max_concurrent_runs integer,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  prefix text NOT NULL UNIQUE,
  secret_sha256 bytea NOT NULL,
  name text,
  created_at timestamptz NOT NULL DEFAULT now(),
  last_used_at timestamptz,
  revoked_at timestamptz
);
CREATE INDEX api_keys_workspace ON api_keys (workspace_id);

-- SDK users: created on first sight, or ahead of time to block them before their first run.
CREATE TABLE sdk_users (
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  user_id text NOT NULL,
  blocked boolean NOT NULL DEFAULT false,
  daily_budget_micros bigint,
  run_count bigint NOT NULL DEFAULT 0,
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, user_id)
);

CREATE TABLE runs (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  user_id text NOT NULL,
  status text NOT NULL,
  metadata jsonb,
  -- json, not jsonb: evaluated_rules keeps its keys in evaluation order.
  decision json NOT NULL,
  started_at timestamptz NOT NULL,
  ended_at timestamptz,
  last_activity_at timestamptz NOT NULL,
  -- Totals kept with each step write, so listings never aggregate over steps.
  step_count integer NOT NULL DEFAULT 0,
  max_sequence integer NOT NULL DEFAULT 0,
  total_tokens bigint NOT NULL DEFAULT 0,
  total_cost_usd numeric NOT NULL DEFAULT 0
);
CREATE INDEX runs_listing ON runs (workspace_id, started_at DESC, id DESC);
CREATE INDEX runs_listing_by_status ON runs (workspace_id, status, started_at DESC, id DESC);
CREATE INDEX runs_listing_by_user ON runs (workspace_id, user_id, started_at DESC, id DESC);
CREATE INDEX runs_running ON runs (workspace_id, last_activity_at) WHERE status = 'RUNNING';

CREATE TABLE steps (
  id uuid PRIMARY KEY,
  run_id uuid NOT NULL REFERENCES runs (id),
  workspace_id uuid NOT NULL,
  sequence integer NOT NULL,
  type text NOT NULL,
  status text NOT NULL,
  model text,
  tool_name text,
  prompt_tokens bigint,
  completion_tokens bigint,
  cached_prompt_tokens bigint,
  cost_usd numeric,
  duration_ms bigint,
  input_data jsonb,
  output_data jsonb,
  -- json, not jsonb: evaluated_rules keeps its keys in evaluation order.
  decision json NOT NULL,
  created_at timestamptz NOT NULL,
  finished_at timestamptz,
  CONSTRAINT steps_run_sequence UNIQUE (run_id, sequence)
);

CREATE TABLE model_pricing (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  model text NOT NULL,
  input_cost_per_token numeric NOT NULL,
  output_cost_per_token numeric NOT NULL,
  is_active boolean NOT NULL DEFAULT true,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace_id, model)
);

-- Durable counters, written in the same transaction as the records they count. They are the
-- truth the counter store reads (SQL mode) or rebuilds from (Redis mode).
CREATE TABLE usage_daily (
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  day date NOT NULL,
  spend_micros bigint NOT NULL DEFAULT 0,
  runs integer NOT NULL DEFAULT 0,
  PRIMARY KEY (workspace_id, day)
);
CREATE TABLE user_usage_daily (
  workspace_id uuid NOT NULL,
  user_id text NOT NULL,
  day date NOT NULL,
  spend_micros bigint NOT NULL DEFAULT 0,
  runs integer NOT NULL DEFAULT 0,
  PRIMARY KEY (workspace_id, user_id, day)
);

-- The first answer to a POST carrying an Idempotency-Key, replayed on a retry.
CREATE TABLE idempotency_keys (
  workspace_id uuid NOT NULL,
  key text NOT NULL,
  fingerprint text NOT NULL,
  status_code integer NOT NULL,
  response jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (workspace_id, key)
);
CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);
`,
  },
  {
    version: 2,
    name: 'accounts',
    sql: `
-- Dashboard accounts. token_version is in every JWT; a password change bumps it, which
-- invalidates every token issued before.
CREATE TABLE accounts (
  id uuid PRIMARY KEY,
  email text NOT NULL UNIQUE,
  password_hash text NOT NULL,
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  token_version integer NOT NULL DEFAULT 1,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX accounts_workspace ON accounts (workspace_id);

-- Daemon-wide settings shared by every process on the database (the JWT signing secret).
CREATE TABLE settings (
  key text PRIMARY KEY,
  value text NOT NULL
);

CREATE INDEX sdk_users_listing ON sdk_users (workspace_id, last_seen_at DESC, user_id);
`,
  },
  {
    version: 3,
    name: 'proxy_tokens',
    sql: `
-- Run-scoped proxy tokens (runguard exec): only the SHA-256 of the token is kept. A token is
-- valid while its run is RUNNING; the run's status is the only validity there is.
CREATE TABLE proxy_tokens (
  token_sha256 bytea PRIMARY KEY,
  run_id uuid NOT NULL REFERENCES runs (id),
  workspace_id uuid NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX proxy_tokens_run ON proxy_tokens (run_id);
`,
  },
  {
    version: 4,
    name: 'steps_leave_the_run_row',
    sql: `
-- Every step insert and finish used to update its run's row (sequence, count, totals, activity),
-- so parallel calls in one run queued on that row lock, a commit each. The totals are now read
-- from the steps (one indexed aggregate per listed run), a run's activity is its latest step
-- (found by the stale-run sweep through steps_run_sequence: no index of its own to maintain on
-- every insert), and a proxied call's sequence is allocated by the daemon (the unique
-- constraint arbitrates).
ALTER TABLE runs DROP COLUMN step_count, DROP COLUMN max_sequence, DROP COLUMN total_tokens,
  DROP COLUMN total_cost_usd, DROP COLUMN last_activity_at;
DROP INDEX IF EXISTS runs_running;
CREATE INDEX runs_running ON runs (started_at) WHERE status = 'RUNNING';
`,
  },
  {
    version: 5,
    name: 'step_data_as_json',
    sql: `
-- A step's caller data is written as json, not jsonb: a run detail sends it as text, and jsonb
-- renders its text anew on every read (1.2 ms of a 1,000-step detail's 6 ms statement), where json
-- keeps it. json also keeps the caller's key order; nothing queries inside these values. New
-- columns rather than a type change, which would rewrite the table under an exclusive lock and
-- stall every daemon's step writes meanwhile: input_data and output_data keep what steps written
-- before this version hold, and reads take whichever column is set.
ALTER TABLE steps ADD COLUMN input_json json, ADD COLUMN output_json json;
`,
  },
  {
    version: 6,
    name: 'run_totals_kept_again',
    sql: `
-- A run's totals summed from its steps on every read cost the run list ~350 ms for a page of 50
-- runs of 20,000 steps. They are kept again, but not as version 4 found them (a row update per
-- step): a batch of step inserts adds its count to each run's row, which it already locks; a
-- batch of finishes adds its tokens and costs to run_totals, a row apart, so the two batches
-- never wait for each other. Runs from before this version keep a NULL step_count and are
-- still summed from their steps when read: no backfill holds the table at upgrade.
ALTER TABLE runs ADD COLUMN step_count integer;
ALTER TABLE runs ALTER COLUMN step_count SET DEFAULT 0;
-- No foreign key: its check would lock the run's row (a WAL record) on every batch of finishes;
-- a totals row is only written by finishSteps, for steps it finds.
CREATE TABLE run_totals (
  run_id uuid PRIMARY KEY,
  total_tokens bigint NOT NULL,
  total_cost_usd numeric NOT NULL
);
`,
  },
  {
    version: 7,
    name: 'run_step_count_without_default',
    sql: `
-- Version 6's default counted a run that a daemon from before it starts (its insert names no
-- step_count; both run during an upgrade) as 0, and nobody adds that daemon's steps to it. With
-- no default such a run is NULL, so it is summed from its steps when read, as older runs are.
-- A catalog change only.
ALTER TABLE runs ALTER COLUMN step_count DROP DEFAULT;
`,
  },
  {
    version: 8,
    name: 'run_counts_kept',
    sql: `
-- The run list's total counted the workspace's runs on every read: 7-10 ms at 50,000 runs,
-- 44-60 ms at 500,000, and more with every run. Postgres now keeps the counts by workspace and
-- status, with each write of runs: triggers, so every writer counts (a daemon from before this
-- version during an upgrade, the stale-run sweep, an operator's SQL). A count is split in
-- shards by the writing connection (pg_backend_pid % 64), so a transaction raises its own
-- connection's rows: starts and ends do not queue on one row per workspace, only the rare
-- connections that share a shard wait on each other. A shard may go below zero (a run started
-- on one connection and ended on another); the sum is the count. Each statement raises its
-- rows in one order, so one statement per transaction (as every daemon write of runs is)
-- cannot deadlock on them; two transactions that each write runs in several statements, with
-- statuses in different orders, can (the daemon retries a transaction chosen as a deadlock victim).
CREATE TABLE run_counts (
  workspace_id uuid NOT NULL,
  status text NOT NULL,
  shard smallint NOT NULL,
  runs bigint NOT NULL,
  PRIMARY KEY (workspace_id, status, shard)
) WITH (fillfactor = 50);

-- What a statement changed: -1 for each row before it, +1 for each row after it, by workspace
-- and status. An update that leaves both alone (a batch of steps raising step_count) sums to 0
-- and writes nothing.
CREATE FUNCTION run_counts_raise() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO run_counts AS c (workspace_id, status, shard, runs)
    SELECT workspace_id, status, pg_backend_pid() % 64, count(*) FROM new_runs
    GROUP BY workspace_id, status ORDER BY workspace_id, status
    ON CONFLICT (workspace_id, status, shard) DO UPDATE SET runs = c.runs + EXCLUDED.runs;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO run_counts AS c (workspace_id, status, shard, runs)
    SELECT workspace_id, status, pg_backend_pid() % 64, sum(runs) FROM (
      SELECT workspace_id, status, -1 AS runs FROM old_runs
      UNION ALL SELECT workspace_id, status, 1 FROM new_runs
    ) moved
    GROUP BY workspace_id, status HAVING sum(runs) <> 0 ORDER BY workspace_id, status
    ON CONFLICT (workspace_id, status, shard) DO UPDATE SET runs = c.runs + EXCLUDED.runs;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO run_counts AS c (workspace_id, status, shard, runs)
    SELECT workspace_id, status, pg_backend_pid() % 64, -count(*) FROM old_runs
    GROUP BY workspace_id, status ORDER BY workspace_id, status
    ON CONFLICT (workspace_id, status, shard) DO UPDATE SET runs = c.runs + EXCLUDED.runs;
  ELSE
    TRUNCATE run_counts; -- every row, whatever the transaction's snapshot
  END IF;
  RETURN NULL;
END
$fn$;

-- Taken before the count below and held to commit: no run is written between the two.
LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE;
CREATE TRIGGER run_counts_insert AFTER INSERT ON runs REFERENCING NEW TABLE AS new_runs
  FOR EACH STATEMENT EXECUTE FUNCTION run_counts_raise();
CREATE TRIGGER run_counts_update AFTER UPDATE ON runs REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs
  FOR EACH STATEMENT EXECUTE FUNCTION run_counts_raise();
CREATE TRIGGER run_counts_delete AFTER DELETE ON runs REFERENCING OLD TABLE AS old_runs
  FOR EACH STATEMENT EXECUTE FUNCTION run_counts_raise();
CREATE TRIGGER run_counts_truncate AFTER TRUNCATE ON runs
  FOR EACH STATEMENT EXECUTE FUNCTION run_counts_raise();
-- The runs written so far, once (0.1 s for 500,000 runs; writes wait meanwhile).
INSERT INTO run_counts (workspace_id, status, shard, runs)
SELECT workspace_id, status, 0, count(*) FROM runs GROUP BY workspace_id, status;
`,
  },
  {
    version: 9,
    name: 'budgets_that_hold',
    sql: `
-- Whether a MODEL_CALL step of a model without an active price is allowed (its cost then
-- unknown, counted as 0) or denied MODEL_NOT_PRICED. A default: no rewrite of the table.
ALTER TABLE workspaces ADD COLUMN unpriced_models text NOT NULL DEFAULT 'allow'
  CHECK (unpriced_models IN ('allow', 'deny'));
`,
  },
  {
    version: 10,
    name: 'prompt_cache_prices',
    sql: `
-- Prompt caching priced apart: a cache read or write costs its own price when the entry has one
-- (NULL: the input price applies). \`source\` says who set an entry: 'user' (a PUT, by hand) or
-- 'catalog' (an import); an import never overwrites a user's entry unless told to. Entries from
-- before this version count as the user's: nothing says they were not set by hand.
ALTER TABLE model_pricing
  ADD COLUMN cache_read_input_cost_per_token numeric,
  ADD COLUMN cache_write_input_cost_per_token numeric,
  ADD COLUMN source text NOT NULL DEFAULT 'user';

-- A step's input split: cached_prompt_tokens holds the cache reads (its name is older than cache
-- writes); both are parts of prompt_tokens. Reasoning tokens are part of completion_tokens, kept
-- for the audit. Catalog changes only: no row is rewritten.
ALTER TABLE steps
  ADD COLUMN cache_write_tokens bigint,
  ADD COLUMN reasoning_tokens bigint;
`,
  },
  {
    version: 12,
    name: 'webhooks',
    sql: `
-- Alerts and webhooks (docs/webhooks.md). An event is written in the same transaction as the
-- change that causes it, with one delivery per subscribed endpoint (the outbox); daemons claim
-- endpoints by lease and deliver each endpoint's queue in order.
CREATE TABLE webhook_endpoints (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  url text NOT NULL,
  description text,
  events text[] NOT NULL,
  format text NOT NULL DEFAULT 'standard',
  -- whsec_<base64>: kept as is, since every delivery is signed with it.
  secret text NOT NULL,
  enabled boolean NOT NULL DEFAULT true,
  disabled_reason text,
  -- The daemon delivering to it holds it until lease_until: one attempt at a time per endpoint.
  lease_owner text,
  lease_until timestamptz,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
CREATE INDEX webhook_endpoints_workspace ON webhook_endpoints (workspace_id, created_at);

CREATE TABLE webhook_events (
  id text PRIMARY KEY,
  -- Commit order within a workspace, near enough: deliveries follow it per endpoint.
  seq bigserial NOT NULL,
  workspace_id uuid NOT NULL,
  type text NOT NULL,
  -- At most one event per key: a threshold per subject and day, a denial window, a failed run.
  dedupe_key text UNIQUE,
  data jsonb NOT NULL,
  created_at timestamptz NOT NULL
);
CREATE INDEX webhook_events_age ON webhook_events (created_at);

CREATE TABLE webhook_deliveries (
  id uuid PRIMARY KEY,
  endpoint_id uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
  event_id text NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
  seq bigint NOT NULL,
  -- pending, delivered, failed (gave up or refused); a replay is a new pending delivery.
  status text NOT NULL DEFAULT 'pending',
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL,
  finished_at timestamptz,
  last_status_code integer,
  last_error text
);
CREATE INDEX webhook_deliveries_queue ON webhook_deliveries (endpoint_id, seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_listing ON webhook_deliveries (endpoint_id, created_at DESC, id DESC);

CREATE TABLE webhook_attempts (
  delivery_id uuid NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
  attempt integer NOT NULL,
  attempted_at timestamptz NOT NULL,
  status_code integer,
  latency_ms integer NOT NULL,
  error text,
  PRIMARY KEY (delivery_id, attempt)
);

-- Where each periodic scan (denial windows, failed runs) got to, shared by every daemon.
CREATE TABLE webhook_cursors (
  name text PRIMARY KEY,
  position timestamptz NOT NULL
);

-- The threshold scan reads today's usage only (one row per workspace and day: small). The
-- indexes on steps, runs and users' usage are late indexes (late-indexes.ts): built without
-- holding writes.
CREATE INDEX usage_daily_day ON usage_daily (day);
`,
  },
  {
    version: 13,
    name: 'dashboard_sign_in_links',
    sql: `
-- One-time dashboard sign-in links (runguard dashboard), minted with an API key: only the
-- SHA-256 of the token is kept; redeeming sets used_at in the same statement that checks it, so
-- a link signs in once. A workspace made by the first start has no account: a link creates one
-- without email or password (its owner names both from the dashboard), hence the NULLs. Login
-- matches by email, so such an account cannot be signed in to with a password.
ALTER TABLE accounts ALTER COLUMN email DROP NOT NULL, ALTER COLUMN password_hash DROP NOT NULL;
CREATE TABLE sign_in_links (
  token_sha256 bytea PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  expires_at timestamptz NOT NULL,
  used_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sign_in_links_expiry ON sign_in_links (expires_at);
`,
  },
  {
    version: 14,
    name: 'workspace_retention',
    sql: `
-- Ended runs older than this many days are purged (with their steps and totals); NULL keeps them
-- forever. At least 35 days, so a retention can never reach into a counted window (this UTC
-- month, yesterday): the purge also stops at their start, whatever this says.
ALTER TABLE workspaces ADD COLUMN retention_days integer
  CONSTRAINT workspaces_retention_days_min CHECK (retention_days IS NULL OR retention_days >= 35);
`,
  },
  {
    version: 15,
    name: 'step_estimates',
    sql: `
-- The upper bound of a step's cost, in integer microdollars, known before it is allowed: the
-- proxy's estimate of a model call from its request (every proxied MODEL_CALL, in every budget
-- mode), or an API step's max_cost_usd, or (budget_mode "reserve") the workspace's default step
-- reservation. NULL: none known. An unfinished (ALLOWED) step's estimate is its outstanding
-- reservation in "reserve" mode, and what a lost result is charged at.
-- (Its partial index, steps_outstanding_estimates, is a late index: see late-indexes.ts.)
ALTER TABLE steps ADD COLUMN estimate_micros bigint;
-- "spend": the budget rules deny once spend so far reaches the budget (the seed's rule).
-- "reserve": each step reserves its estimate first; they deny when spend + outstanding
-- reservations + this estimate would pass the budget.
ALTER TABLE workspaces ADD COLUMN budget_mode text NOT NULL DEFAULT 'spend'
  CHECK (budget_mode IN ('spend', 'reserve'));
-- What an API step without max_cost_usd reserves in "reserve" mode (default $0.05).
ALTER TABLE workspaces ADD COLUMN default_step_reservation_micros bigint NOT NULL DEFAULT 50000
  CHECK (default_step_reservation_micros >= 0);
`,
  },
  {
    version: 16,
    name: 'daemon_instances',
    sql: `
-- Crash recovery of proxied calls (docs/budgets.md). Each daemon process registers here at start
-- and beats its heartbeat_at (the database's clock, so daemons' clocks need not agree); one whose
-- heartbeat lapsed, that stopped, or whose process is gone from this machine is dead, and a live
-- daemon ends what it left: its unfinished proxied steps (FAILED RESULT_LOST, charged at their
-- estimate) and the runs it started for calls of their own. kernel and pid_space name the
-- process's machine as directory-lock.ts does, so a pid is trusted only there.
CREATE TABLE daemon_instances (
  id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  host text NOT NULL,
  pid integer NOT NULL,
  kernel text NOT NULL,
  pid_space text NOT NULL,
  version text NOT NULL,
  started_at timestamptz NOT NULL,
  heartbeat_at timestamptz NOT NULL,
  stopped_at timestamptz,
  recovered_at timestamptz
);
-- The daemon instance that forwards a proxied call and records its result (NULL: a step of the
-- API, whose client records it). A run's: the daemon started it for a call of its own and ends
-- it. Catalog changes only; no foreign key (its check would cost every proxied step a lookup).
-- Their indexes are late indexes (late-indexes.ts), built without holding writes.
ALTER TABLE steps ADD COLUMN daemon_id integer;
ALTER TABLE runs ADD COLUMN daemon_id integer;
`,
  },
  {
    version: 17,
    name: 'runaway_limits',
    sql: `
-- Runaway agents (docs/limits.md). A workspace's defaults for its runs' limits and its users'
-- steps per minute (NULL: off). Catalog changes only: no row is rewritten.
ALTER TABLE workspaces
  ADD COLUMN run_max_steps integer,
  ADD COLUMN run_max_cost_micros bigint,
  ADD COLUMN run_max_identical_calls integer,
  ADD COLUMN user_steps_per_minute integer;

-- The limits a run started with (NULL: none), fixed for its life, and what its step checks read
-- and write under the run's row lock: the steps it was allowed, the hash of the last allowed call
-- and how many allowed calls in a row were that call. Kept only for runs with a limit.
ALTER TABLE runs
  ADD COLUMN max_steps integer,
  ADD COLUMN max_cost_micros bigint,
  ADD COLUMN max_identical_calls integer,
  ADD COLUMN allowed_steps integer,
  ADD COLUMN last_call_hash text,
  ADD COLUMN identical_calls integer;

-- A user's allowed steps of the last minute (rule user_rate), where no Redis keeps them: written
-- and counted under a per-user lock, pruned as they leave the window. No foreign key: a row lives
-- a minute.
CREATE TABLE user_step_times (
  workspace_id uuid NOT NULL,
  user_id text NOT NULL,
  at timestamptz NOT NULL,
  step_id uuid NOT NULL
);
CREATE INDEX user_step_times_window ON user_step_times (workspace_id, user_id, at);
`,
  },
  {
    version: 18,
    name: 'run_models_kept',
    sql: `
-- The models a run's steps named, distinct, in first-use order (at most RUN_MODELS_KEPT), for the
-- run list. Kept by the step insert, which already updates the run's row for its step count, so
-- the list reads a column instead of its runs' steps. No default, as step_count (version 7): a
-- run from before this version, or started by an older daemon during an upgrade, is NULL and its
-- models are read from its steps when listed. A catalog change only.
ALTER TABLE runs ADD COLUMN models text[];
`,
  },
  {
    version: 19,
    name: 'workspace_time_zone',
    sql: `
-- The IANA zone whose local midnights start a workspace's days, weeks and months (docs/budgets.md).
-- The daily usage rows written from now on are keyed by its local dates; earlier ones by UTC's.
ALTER TABLE workspaces ADD COLUMN time_zone text NOT NULL DEFAULT 'UTC';
`,
  },
  {
    version: 20,
    name: 'mcp_tools',
    sql: `
-- Tool calls through the sidecar (docs/mcp.md). The MCP servers a workspace registers by name:
-- the upstream's Streamable HTTP endpoint and the headers sent with every call (the operator's
-- secrets: answered masked, never logged).
CREATE TABLE mcp_servers (
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  name text NOT NULL,
  url text NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL,
  PRIMARY KEY (workspace_id, name)
);

-- A price per call of the tools matching a pattern over "{server}.{tool}". The pattern as a LIKE
-- pattern and its specificity are written with it, so the statement that finishes a TOOL_CALL
-- step prices it itself, exactly, as it prices model calls: the most specific pattern wins.
CREATE TABLE tool_pricing (
  workspace_id uuid NOT NULL REFERENCES workspaces (id),
  pattern text NOT NULL,
  like_pattern text NOT NULL,
  literal_chars integer NOT NULL,
  stars integer NOT NULL,
  per_call_usd numeric NOT NULL CHECK (per_call_usd >= 0),
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (workspace_id, pattern)
);

-- Which tools the workspace's steps may call (rule tool_allowed); NULL: every tool.
ALTER TABLE workspaces ADD COLUMN tool_policy jsonb;

-- A tool call's MCP facts: the server and the JSON-RPC request id. Catalog changes only.
ALTER TABLE steps ADD COLUMN mcp json;
`,
  },
  {
    version: 21,
    name: 'budgets',
    sql: `
-- Budgets of /v1/budgets (rule 13): a cap on the spend of a workspace, a user, an API key or a
-- run tag, per day, ISO week or month of the workspace's time zone. One per scope, subject and
-- period (the subject of a workspace budget is NULL: coalesced for the index).
CREATE TABLE budgets (
  id uuid PRIMARY KEY,
  workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
  scope text NOT NULL CHECK (scope IN ('workspace', 'user', 'key', 'tag')),
  subject text,
  period text NOT NULL CHECK (period IN ('day', 'week', 'month')),
  limit_micros bigint NOT NULL CHECK (limit_micros >= 0),
  action text NOT NULL CHECK (action IN ('deny', 'alert')),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX budgets_one_per_period ON budgets (workspace_id, scope, coalesce(subject, ''), period);
`,
  },
  {
    version: 22,
    name: 'key_roles',
    sql: `
-- Least privilege for API keys (docs/budgets.md): an "agent" key starts runs, records steps and
-- reads the runs it started; an "admin" key (every key before this version) does everything.
ALTER TABLE api_keys ADD COLUMN role text NOT NULL DEFAULT 'admin' CHECK (role IN ('admin', 'agent'));
-- The key that started a run through the run API (null: a dashboard token, or before this version).
ALTER TABLE runs ADD COLUMN api_key_id uuid;
`,
  },
  {
    version: 23,
    name: 'run_tags',
    sql: `
-- A run's tags ({"project": "search"}: at most 16 string pairs, bounded at the API), fixed at its
-- start: what runs are filtered, reported and budgeted by. A constant default: a catalog change,
-- and every run from before has none. Its index is a late one (late-indexes.ts).
ALTER TABLE runs ADD COLUMN tags jsonb NOT NULL DEFAULT '{}';
`,
  },
  {
    version: 24,
    name: 'long_context_prices',
    sql: `
-- A model's long-context tier (Gemini Pro above 200k prompt tokens, GPT-5.4 above 272k): a call
-- whose prompt_tokens are above long_context_above_tokens is priced, every token of it, at the
-- long_* prices (cache prices NULL: the long input price). NULL threshold: no such tier; the tier's
-- input and output prices are given with it or not at all. Catalog changes only.
ALTER TABLE model_pricing
  ADD COLUMN long_context_above_tokens bigint CHECK (long_context_above_tokens >= 0),
  ADD COLUMN long_input_cost_per_token numeric,
  ADD COLUMN long_output_cost_per_token numeric,
  ADD COLUMN long_cache_read_input_cost_per_token numeric,
  ADD COLUMN long_cache_write_input_cost_per_token numeric,
  ADD CONSTRAINT model_pricing_long_context_whole CHECK (
    (long_context_above_tokens IS NULL) = (long_input_cost_per_token IS NULL)
    AND (long_context_above_tokens IS NULL) = (long_output_cost_per_token IS NULL)
    AND (long_context_above_tokens IS NOT NULL
      OR (long_cache_read_input_cost_per_token IS NULL AND long_cache_write_input_cost_per_token IS NULL)));
`,
  },
  {
    version: 25,
    name: 'run_unpriced_and_denied_kept',
    sql: `
-- What a run's cost and status do not say, for the run list (docs/cli.md, runs list): its model
-- calls that used tokens but have no price (their cost unknown, counted as $0), and its denied
-- steps with the reason of the last one. The unpriced calls are counted by the batch of finishes
-- with the run's tokens and cost (run_totals); the denials by the batch of step inserts, with the
-- run's step count (its row, already locked and written). Constant defaults: catalog changes.
ALTER TABLE run_totals ADD COLUMN unpriced_calls integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN denied_steps integer NOT NULL DEFAULT 0, ADD COLUMN last_denial text;

-- The runs written so far that keep their totals (a run from before version 6 is summed from its
-- steps when read). A step an older daemon writes during an upgrade is not counted.
UPDATE runs r SET denied_steps = d.steps, last_denial = d.reason
FROM (
  SELECT run_id, count(*) AS steps, (array_agg(decision->>'reason' ORDER BY created_at DESC, sequence DESC))[1] AS reason
  FROM steps WHERE status = 'BLOCKED' GROUP BY run_id
) d
WHERE r.id = d.run_id AND r.step_count IS NOT NULL;
INSERT INTO run_totals AS t (run_id, total_tokens, total_cost_usd, unpriced_calls)
SELECT s.run_id, 0, 0, count(*) FROM steps s JOIN runs r ON r.id = s.run_id
WHERE r.step_count IS NOT NULL AND s.type = 'MODEL_CALL' AND s.cost_usd IS NULL
  AND (s.prompt_tokens IS NOT NULL OR s.completion_tokens IS NOT NULL)
GROUP BY s.run_id
ON CONFLICT (run_id) DO UPDATE SET unpriced_calls = EXCLUDED.unpriced_calls;
`,
  },
  {
    version: 26,
    name: 'budget_subjects',
    sql: `
-- Budgets of scope key and tag (docs/budgets.md). The API key whose credential made a step: the
-- run API's caller, a proxied call's x-runguard-key, or the key that minted the proxy token it
-- came with (null: a step from before this version).
ALTER TABLE steps ADD COLUMN api_key_id uuid;
-- The key that minted a run's proxy token (null: minted before this version: then the run's own
-- key counts).
ALTER TABLE proxy_tokens ADD COLUMN api_key_id uuid;
-- Spend per local day of what key and tag budgets cap, kept by the statement that finishes steps
-- as usage_daily is: subject 'key:<api key id>' or 'tag:<name>:<value>'.
CREATE TABLE subject_usage_daily (
  workspace_id uuid NOT NULL,
  subject text NOT NULL,
  day date NOT NULL,
  spend_micros bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (workspace_id, subject, day)
);
`,
  },
];

export async function migrate(db: Db): Promise<number[]> {
  return db.transaction(async (tx) => {
    // Whatever the server's default: under repeatable read, migration 8 would count the runs
    // with a snapshot taken before its lock, and miss the ones written by writers it waited for.
    await tx.query('SET TRANSACTION ISOLATION LEVEL READ COMMITTED');
    // Not the pool's statement timeout: a backfill over a long history, or the wait for an older
    // daemon's write to let go of a table, may take longer, and a migration cut short fails the
    // daemon's start, and the next one's again.
    await tx.query('SET LOCAL statement_timeout = 0');
    await tx.query('SELECT pg_advisory_xact_lock($1)', [ADVISORY_LOCKS.migrations]);
    await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await tx.query<{ version: number }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((row) => Number(row.version)));
    const done: number[] = [];
    for (const migration of MIGRATIONS) {
      if (applied.has(migration.version)) continue;
      await tx.exec(migration.sql);
      await tx.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
        migration.version,
        migration.name,
      ]);
      done.push(migration.version);
    }
    return done;
  });
}

/** The highest migration version applied (0: none); the table must exist (`migrate` creates it). */
export async function maxAppliedVersion(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ version: number }>('SELECT max(version) AS version FROM schema_migrations');
  return Number(rows[0]?.version ?? 0);
}

export interface SchemaStatus {
  /** The version the schema is at: the last of this code's migrations applied with all before it (0: none). */
  version: number;
  /** The version this code expects: its last migration's. */
  expected: number;
  /** This code's migrations not applied yet: the schema is behind. */
  pending: number[];
  /** Applied versions this code does not know: a newer runguard migrated the schema, it is ahead. */
  unknown: number[];
}

/**
 * Where the database's schema stands against this code's migrations, read without changing
 * anything (no table created, no lock taken): for commands that must not migrate.
 */
export async function schemaStatus(db: Queryable): Promise<SchemaStatus> {
  const expected = MIGRATIONS[MIGRATIONS.length - 1]!.version;
  const { rows: table } = await db.query<{ exists: boolean }>(
    "SELECT to_regclass('schema_migrations') IS NOT NULL AS exists",
  );
  const { rows } = table[0]?.exists
    ? await db.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version')
    : { rows: [] };
  const applied = new Set(rows.map((row) => Number(row.version)));
  const known = new Set(MIGRATIONS.map((migration) => migration.version));
  const pending = MIGRATIONS.filter((migration) => !applied.has(migration.version)).map(
    (migration) => migration.version,
  );
  const version =
    MIGRATIONS.filter((migration) => pending.length === 0 || migration.version < pending[0]!).at(-1)?.version ?? 0;
  return { version, expected, pending, unknown: [...applied].filter((appliedVersion) => !known.has(appliedVersion)) };
}
