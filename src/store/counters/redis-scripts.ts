/**
 * The Lua scripts the Redis counters run, each an atomic read and write in one round trip, and the
 * arguments each takes, laid out as its KEYS and ARGV expect (keys: redis-keys.ts).
 */
import { randomInt } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { CounterScope, DailySpend } from './counters.js';
import { sealKey, spendKeys, stateKey, subjectKeys } from './redis-keys.js';
import { STEP_RATE_WINDOW_MS, type StepSlotRequest } from './step-rate.js';

const DAY_TTL_SECONDS = 2 * 24 * 3600;
/** A seal outlives by far the past spend remembered under it (PAST_MAX_AGE_MS). */
const SEAL_TTL_SECONDS = 24 * 3600;

/**
 * KEYS: a workspace's counters of one day, then its seal and its state version. ARGV: each
 * counter's total, then the day, the TTL, and 'raise' (to the larger of the two) or 'set'.
 * Where a counter changed and the day is sealed, the state version is bumped.
 */
const RAISE_TO = `
local n = #KEYS - 2
local day, ttl, mode = ARGV[n + 1], ARGV[n + 2], ARGV[n + 3]
local changed = false
for i = 1, n do
  local current = tonumber(redis.call('GET', KEYS[i]) or '-1')
  local total = tonumber(ARGV[i])
  if total > current or mode == 'set' then
    redis.call('SET', KEYS[i], ARGV[i], 'EX', ttl)
    changed = changed or total ~= current
  end
end
if changed then
  local sealed = redis.call('GET', KEYS[n + 1])
  if sealed and day <= sealed and redis.call('EXISTS', KEYS[n + 2]) == 1 then redis.call('INCR', KEYS[n + 2]) end
end
return 1`;

/**
 * KEYS: a workspace's seal and its state version. ARGV: the last day to seal (yesterday), a
 * first version where there is none, the seal's TTL. Answers the version, read once sealed.
 */
const SEAL = `
local sealed = redis.call('GET', KEYS[1])
if not sealed or sealed < ARGV[1] then sealed = ARGV[1] end
redis.call('SET', KEYS[1], sealed, 'EX', ARGV[3])
local version = redis.call('GET', KEYS[2])
if not version then
  redis.call('SET', KEYS[2], ARGV[2])
  version = ARGV[2]
end
return version`;

/**
 * KEYS: a user's window (a sorted set of step ids by time); ARGV: now (ms), the window (ms), the
 * limit, the step's id. Drops what left the window, counts, and adds the step when there is room.
 * Answers {taken (0/1), steps in the window before it, the oldest one's time (-1: none)}.
 */
const TAKE_STEP_SLOT = `
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local steps = redis.call('ZCARD', KEYS[1])
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or '-1'
if steps < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, steps, oldest}
end
return {0, steps, oldest}`;

/** A script's arguments: how many of them are keys, then the keys, then ARGV. */
type ScriptArgs = [number, ...(string | number)[]];

/** The scripts as commands of the client (and of its pipelines: `rgRaiseTo` is pipelined on a rebuild). */
export interface CounterScripts {
  rgRaiseTo(...args: ScriptArgs): Promise<number>;
  rgSeal(...args: ScriptArgs): Promise<string>;
  rgTakeStepSlot(...args: ScriptArgs): Promise<[number, number, string]>;
}

/** Defines the scripts on the client: each is sent once, then called by its hash. */
export function withCounterScripts(redis: Redis): Redis & CounterScripts {
  redis.defineCommand('rgRaiseTo', { lua: RAISE_TO });
  redis.defineCommand('rgSeal', { lua: SEAL });
  redis.defineCommand('rgTakeStepSlot', { lua: TAKE_STEP_SLOT });
  return redis as Redis & CounterScripts;
}

/**
 * RAISE_TO's arguments for the scope's day: its counters (the workspace's and user's where the
 * scope names a user; the subjects' of `totals`), the workspace's seal and version.
 */
export function raiseArgs(
  scope: Pick<CounterScope, 'workspaceId' | 'day'> & { userId?: string },
  totals: DailySpend,
  mode: 'raise' | 'set',
): ScriptArgs {
  const subjects = Object.entries(totals.subjects ?? {});
  const own = scope.userId === undefined ? [] : spendKeys({ ...scope, userId: scope.userId });
  const ownTotals = scope.userId === undefined ? [] : [totals.workspaceDailySpendMicros, totals.userDailySpendMicros];
  const keysOfSubjects = subjectKeys(
    scope.workspaceId,
    scope.day,
    subjects.map(([subject]) => subject),
  );
  return [
    own.length + keysOfSubjects.length + 2,
    ...own,
    ...keysOfSubjects,
    sealKey(scope.workspaceId),
    stateKey(scope.workspaceId),
    ...ownTotals,
    ...subjects.map(([, spend]) => spend.day),
    scope.day,
    DAY_TTL_SECONDS,
    mode,
  ];
}

/** SEAL's arguments: the workspace's days up to `lastDay` sealed; a random first version, as where it is lost. */
export function sealArgs(workspaceId: string, lastDay: string): ScriptArgs {
  return [2, sealKey(workspaceId), stateKey(workspaceId), lastDay, randomInt(2 ** 47), SEAL_TTL_SECONDS];
}

/** TAKE_STEP_SLOT's arguments: the user's window at the request's time. */
export function stepSlotArgs(key: string, request: StepSlotRequest): ScriptArgs {
  return [1, key, request.nowMs, STEP_RATE_WINDOW_MS, request.limit, request.stepId];
}
