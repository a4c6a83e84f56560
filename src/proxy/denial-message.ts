/**
 * The message of a proxied call's 403: what was denied, the rule's code, and its numbers, so an
 * agent (or its log) need not guess: `runguard denied this model call: USER_DAILY_BUDGET_EXCEEDED
 * (user daily budget spent: $0.00045 of $0.0004; resets 2026-11-27T00:00:00Z).`
 */
import { explainDenial } from '../contract/denial-detail.js';
import type { Decision } from '../contract/decision.js';

export function denialMessage(what: string, decision: Decision): string {
  const reason = decision.reason ?? 'DENIED';
  const numbers = decision.reason ? ` (${explainDenial(decision.reason, decision.detail)})` : '';
  return `runguard denied this ${what}: ${reason}${numbers}.`;
}

/**
 * How a proxied call's denial is answered. A user rate limit is worth retrying: the provider's
 * 429 with `Retry-After` (its SDK backs off and retries). Every other denial does not get better
 * by retrying: 403, which provider SDKs raise as a permission error without retrying.
 */
export function denialStatus(decision: Decision): { status: 403 | 429; retryAfterSeconds: number | null } {
  const retryAfter = decision.detail?.retry_after_s;
  if (decision.reason === 'USER_RATE_LIMITED' && typeof retryAfter === 'number')
    return { status: 429, retryAfterSeconds: retryAfter };
  return { status: 403, retryAfterSeconds: null };
}
