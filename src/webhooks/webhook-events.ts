/**
 * The events runguard tells webhooks about, and how each is written: always into the caller's
 * transaction (the outbox), so an event exists exactly when the change that caused it committed.
 */
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../contract/index.js';
import type { Queryable } from '../store/db.js';
import { insertEvent } from '../store/webhook-outbox.js';
import { timeOrderedId } from '../store/time-ordered-id.js';

/** What an endpoint gets when it names no events: all but `run.failed`, which is opt-in (it is one per failed run). */
export const DEFAULT_EVENTS: WebhookEventType[] = WEBHOOK_EVENT_TYPES.filter((type) => type !== 'run.failed');

/** The ping `POST /v1/webhooks/{id}/test` sends; never subscribed to. */
export const TEST_EVENT = 'webhook.test';

/** Who made a change: an API key or a dashboard account, by id. */
export interface Actor {
  type: 'api_key' | 'account' | 'system';
  id: string;
}

/** `evt_` and a time-ordered id: event ids sort by creation. */
export const newEventId = (now: Date) => `evt_${timeOrderedId(now.getTime()).replace(/-/g, '')}`;

export async function recordEvent(
  tx: Queryable,
  workspaceId: string,
  type: WebhookEventType | typeof TEST_EVENT,
  data: Record<string, unknown>,
  now: Date,
  options: { dedupeKey?: string; endpointId?: string; id?: string } = {},
): Promise<{ id: string; inserted: boolean }> {
  const id = options.id ?? newEventId(now);
  const inserted = await insertEvent(tx, {
    id,
    workspaceId,
    type,
    dedupeKey: options.dedupeKey ?? null,
    data,
    now,
    endpointId: options.endpointId,
  });
  return { id, inserted };
}

/** Fields whose value differs, each as `{before, after}`. */
export function differences<T extends Record<string, unknown>>(
  before: T,
  after: T,
  keys: readonly (keyof T & string)[],
) {
  const changes: Record<string, { before: unknown; after: unknown }> = {};
  for (const key of keys) {
    // A list setting (tool_policy) is a fresh object on each read: compared by its JSON.
    if (JSON.stringify(before[key]) !== JSON.stringify(after[key]))
      changes[key] = { before: before[key], after: after[key] };
  }
  return changes;
}

export interface LostResult {
  workspaceId: string;
  runId: string;
  stepId: string;
  userId: string;
  /** The provider and model of the proxied call, when known. */
  provider?: string | null;
  model?: string | null;
  /** Why the result is lost, for a person: e.g. "the daemon that forwarded the call stopped". */
  reason: string;
}

/**
 * `result.lost`: a proxied call whose result was never recorded because its daemon died. For the
 * crash recovery to call in the transaction that closes the step, so the event exists if and only
 * if that recovery committed; at most one per step, however often recovery runs.
 */
export async function recordResultLost(tx: Queryable, lost: LostResult, now: Date): Promise<boolean> {
  const { inserted } = await recordEvent(
    tx,
    lost.workspaceId,
    'result.lost',
    {
      run_id: lost.runId,
      step_id: lost.stepId,
      user_id: lost.userId,
      provider: lost.provider ?? null,
      model: lost.model ?? null,
      reason: lost.reason,
    },
    now,
    { dedupeKey: JSON.stringify(['result.lost', lost.stepId]) },
  );
  return inserted;
}
