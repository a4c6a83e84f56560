/**
 * Where the Redis counters keep what: every key is hash-tagged by its workspace (`{<id>}`), so a
 * workspace's keys are read together in one MGET and a script may touch them all (Cluster-safe).
 */
import type { CounterScope } from './counters.js';

/** The workspace's and the user's spend of the scope's day. */
export function spendKeys(scope: Pick<CounterScope, 'workspaceId' | 'userId' | 'day'>): [string, string] {
  return [workspaceSpendKey(scope), userSpendKey(scope)];
}

/** The user's spend of the scope's day. */
export function userSpendKey(scope: Pick<CounterScope, 'workspaceId' | 'userId' | 'day'>): string {
  return `{${scope.workspaceId}}:uspend:${scope.day}:${scope.userId}`;
}

/** The workspace's spend of the scope's day. */
export function workspaceSpendKey(scope: Pick<CounterScope, 'workspaceId' | 'day'>): string {
  return `{${scope.workspaceId}}:spend:${scope.day}`;
}

/** The spend on `day` of `subjects` (key and tag budgets'), in their order. */
export function subjectKeys(workspaceId: string, day: string, subjects: readonly string[] = []): string[] {
  return subjects.map((subject) => `{${workspaceId}}:sspend:${day}:${subject}`);
}

/** The workspace's state version: what daemons remember of it is good while it stays the same. */
export function stateKey(workspaceId: string): string {
  return `{${workspaceId}}:state`;
}

/** The last local day whose spend some daemon remembers as past (`YYYY-MM-DD`). */
export function sealKey(workspaceId: string): string {
  return `{${workspaceId}}:sealed`;
}

/** A user's step-rate window: a sorted set of step ids by time. */
export function stepRateKey(workspaceId: string, userId: string): string {
  return `{${workspaceId}}:rate:${userId}`;
}
