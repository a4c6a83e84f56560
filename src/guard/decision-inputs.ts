/**
 * What a check reads before the pure rules decide: the rules' state of the workspace and user, the
 * day's spend with this daemon's pending spend added, and in reserve mode the outstanding
 * reservations (under the workspace's reservation lock when the step reserves).
 */
import { ApiError } from '../errors.js';
import { localDay } from '../periods.js';
import {
  scopeAt,
  subjectOf,
  type CounterScope,
  type DailySpend,
  type DecisionCounters,
} from '../store/counters/counters.js';
import type { Queryable } from '../store/db.js';
import {
  lockReservations,
  NO_RESERVATIONS,
  outstandingReservations,
  spendAndReservations,
  type Reserved,
} from '../store/reservations.js';
import { loadGuardState, loadStepGuardState, workspaceTimeZone, type GuardState } from '../store/workspaces.js';
import type { GuardContext, RunFacts } from './guard-context.js';

/** Reads of the counters before a cost that reached them meanwhile is counted anyway (twice, toward denying). */
export const PENDING_READ_ATTEMPTS = 3;

/**
 * What a workspace's decisions count: the days of its time zone, and the windows of its budgets
 * of a week or a month (rule 13), read with the day's spend in one round trip.
 */
export interface CountingShape {
  timeZone: string;
  week: boolean;
  month: boolean;
  /** The subjects of the workspace's deny budgets of scope key and tag (`subjectOf`), sorted. */
  subjects: readonly string[];
}

/**
 * Each state's counting shape, made once: a remembered state (`GuardStateCache`) serves every
 * decision while its version holds, and states are never changed once read.
 */
const shapes = new WeakMap<GuardState, CountingShape>();

export function countingShape(state: GuardState): CountingShape {
  let shape = shapes.get(state);
  if (shape === undefined) shapes.set(state, (shape = shapeOf(state)));
  return shape;
}

function shapeOf(state: GuardState): CountingShape {
  const deny = state.budgets.filter((budget) => budget.action === 'deny');
  const subjects = new Set<string>();
  for (const budget of deny)
    if ((budget.scope === 'key' || budget.scope === 'tag') && budget.subject !== null)
      subjects.add(subjectOf(budget.scope, budget.subject));
  return {
    timeZone: state.workspace.time_zone,
    week: deny.some((budget) => budget.period === 'week'),
    month: deny.some((budget) => budget.period === 'month'),
    subjects: [...subjects].sort(),
  };
}

const sameShape = (one: CountingShape, other: CountingShape) =>
  one === other ||
  (one.timeZone === other.timeZone &&
    one.week === other.week &&
    one.month === other.month &&
    one.subjects.join('\u0000') === other.subjects.join('\u0000'));

/**
 * The scope a decision reads: the local day, the first days of the windows its budgets need, and
 * those of the call's subjects (`subjects`: its key's and its run's tags') that a budget caps.
 */
export function scopeFor(
  now: Date,
  workspaceId: string,
  userId: string,
  shape: CountingShape,
  subjects: readonly string[] = [],
): CounterScope {
  const scope = scopeAt(now, workspaceId, userId, shape.timeZone);
  if (subjects.length > 0 && shape.subjects.length > 0) {
    const budgeted = subjects.filter((subject) => shape.subjects.includes(subject));
    if (budgeted.length) scope.subjects = budgeted;
  }
  if (!shape.week && !shape.month) return scope;
  const local = localDay(now, shape.timeZone);
  return {
    ...scope,
    ...(shape.week && { weekStart: local.weekStart }),
    ...(shape.month && { monthStart: local.monthStart }),
  };
}

/** What this daemon now knows of a workspace's counting shape, in place of what it knew. */
function learnShape(context: GuardContext, workspaceId: string, shape: CountingShape): void {
  context.shapes.forget(workspaceId);
  context.shapes.remember(workspaceId, shape);
}

/**
 * The workspace's time zone as this daemon last saw it (read from the records the first time).
 * Decisions correct it from the state they read (`decisionInputs`); a result written meanwhile
 * counts on the day of the zone seen before the change.
 */
export async function zoneOf(context: GuardContext, workspaceId: string): Promise<string> {
  const known = context.shapes.get(workspaceId);
  if (known !== undefined) return known.timeZone;
  return workspaceTimeZone(context.db, workspaceId);
}

/**
 * What a decision reads: the day's spend (and its budgets' windows') and the workspace's state
 * version in one read of the counters, then the rules' state of the workspace and user,
 * remembered while that version holds. The counting shape (time zone, windows) is the one this
 * daemon last saw: when the state says it changed, read again.
 */
export async function decisionInputs(
  context: GuardContext,
  workspaceId: string,
  userId: string,
  now: Date,
  subjects: readonly string[] = [],
): Promise<[GuardState, DailySpend, CounterScope]> {
  for (;;) {
    let shape = context.shapes.get(workspaceId);
    if (shape === undefined) {
      shape = countingShape(await loadGuardState(context.db, workspaceId, userId));
      context.shapes.remember(workspaceId, shape);
    }
    const scope = scopeFor(now, workspaceId, userId, shape, subjects);
    const { spend, stateVersion } = await withPendingSpend(context, scope, true);
    let state = context.states.get(workspaceId, userId, stateVersion);
    if (!state) {
      state = await loadGuardState(context.db, workspaceId, userId);
      context.states.set(workspaceId, userId, stateVersion, state);
    }
    const actual = countingShape(state);
    if (sameShape(actual, shape)) return [state, spend, scope];
    learnShape(context, workspaceId, actual);
  }
}

/**
 * A run as this daemon knows it (its workspace and user never change), or undefined the first
 * time. `agentKeyId`: the caller is an agent key, and a run it did not start is not found.
 */
export function knownRun(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  agentKeyId: string | null,
): RunFacts | undefined {
  const known = context.runFacts.get(`${workspaceId}/${runId}`);
  if (known !== undefined && agentKeyId !== null && known.apiKeyId !== agentKeyId) throw new ApiError('RUN_NOT_FOUND');
  return known;
}

/**
 * What the first check of a step in a run this daemon has not seen reads: the run (is it the
 * caller's, does it still run), the rules' state and the day's spend. Later checks take the run
 * from `knownRun` and read `decisionInputs`; whether it still runs is left to the step's insert.
 * `agentKeyId`: as in `knownRun` (read from what is loaded anyway: no round trip of its own).
 */
export async function firstStepCheckInputs(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  now: Date,
  keyId: string | null,
  agentKeyId: string | null,
): Promise<[GuardState, DailySpend, CounterScope, RunFacts]> {
  const found = await loadStepGuardState(context.db, workspaceId, runId);
  if (!found || (agentKeyId !== null && found.runApiKeyId !== agentKeyId)) throw new ApiError('RUN_NOT_FOUND');
  if (found.runStatus !== 'RUNNING') throw new ApiError('RUN_NOT_RUNNING');
  const facts: RunFacts = {
    userId: found.userId,
    limits: found.runLimits,
    tags: found.runTags,
    apiKeyId: found.runApiKeyId,
  };
  context.runFacts.remember(`${workspaceId}/${runId}`, facts);
  const shape = countingShape(found);
  learnShape(context, workspaceId, shape);
  const scope = scopeFor(now, workspaceId, found.userId, shape, subjectsOfCall(facts, keyId));
  const { spend } = await withPendingSpend(context, scope, false);
  return [found, spend, scope, facts];
}

/** The last subjects made for a run's calls, with the key they were made for. */
const runSubjects = new WeakMap<RunFacts, { keyId: string | null; subjects: readonly string[] }>();

/**
 * `callSubjects` of a call in a run this daemon remembers: made once per run and key, not at each
 * of a step's three uses (its scope, its rules, its result's spend). Never changed once made.
 */
export function subjectsOfCall(run: RunFacts, keyId: string | null): readonly string[] {
  const made = runSubjects.get(run);
  if (made !== undefined && made.keyId === keyId) return made.subjects;
  const subjects = callSubjects(keyId, run.tags);
  runSubjects.set(run, { keyId, subjects });
  return subjects;
}

/** A call's subjects (`subjectOf`): the key that makes it, and each of its run's tags (`name:value`). */
export function callSubjects(keyId: string | null | undefined, tags: Readonly<Record<string, string>>): string[] {
  const subjects = Object.entries(tags).map(([name, value]) => subjectOf('tag', `${name}:${value}`));
  return keyId ? [subjectOf('key', keyId), ...subjects] : subjects;
}

/**
 * Reads the counters (with the state's version, `withVersion`, else the spend alone), and adds
 * the spend this daemon released and has not written yet. A held cost that reached the counters
 * during the read may be in it or not: read again. Chained rather than async: every decision
 * reads through it, and an async frame of its own cost more than the one callback.
 */
function withPendingSpend(
  context: GuardContext,
  scope: CounterScope,
  withVersion: boolean,
  attempt = 1,
): Promise<DecisionCounters> {
  // The last read counts what it holds anyway: a copy, so an entry released meanwhile still counts.
  const held = attempt < PENDING_READ_ATTEMPTS ? context.pending.held(scope) : context.pending.heldCopy(scope);
  const read = withVersion
    ? context.counters.readDecisionInputs(scope)
    : context.counters.readSpend(scope).then((spend) => ({ spend, stateVersion: null }));
  return read.then((got) => {
    if (held.overtaken() && attempt < PENDING_READ_ATTEMPTS)
      return withPendingSpend(context, scope, withVersion, attempt + 1);
    const priced = held.priced();
    if (priced) return priced.then(() => ({ spend: held.addTo(got.spend), stateVersion: got.stateVersion }));
    return { spend: held.addTo(got.spend), stateVersion: got.stateVersion };
  });
}

/**
 * What the budget rules count. A step that reserves: the records' spend and outstanding
 * reservations, read under the workspace's reservation lock (held until `db`, a transaction,
 * commits), and on `db` alone, as no other pool connection may be waited for there. Otherwise
 * the spend read before, and the reservations where the rules count them.
 */
export async function budgetCounts(
  db: Queryable,
  scope: CounterScope,
  spend: DailySpend | null,
  reserving: boolean,
  countsReservations: boolean,
): Promise<{ counted: DailySpend; reserved: Reserved }> {
  if (reserving || spend === null) {
    await lockReservations(db, scope.workspaceId);
    const read = await spendAndReservations(db, scope);
    return { counted: read, reserved: read };
  }
  const reserved = countsReservations
    ? await outstandingReservations(db, scope.workspaceId, scope.userId, scope.subjects)
    : NO_RESERVATIONS;
  return { counted: spend, reserved };
}

/** Runs `task` in the workspace's turn when it reserves (see WorkspaceQueue), else at once. */
export function inReservationQueue<T>(
  context: GuardContext,
  reserving: boolean,
  workspaceId: string,
  task: () => Promise<T>,
): Promise<T> {
  return reserving ? context.reservationQueue.run(workspaceId, task) : task();
}
