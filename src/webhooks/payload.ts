/** The body a delivery sends: the event's JSON envelope, or a Slack-compatible `text` message. */
import type { WebhookFormat } from '../store/webhooks.js';

export interface OutgoingEvent {
  id: string;
  type: string;
  workspace_id: string;
  created_at: Date;
  data: unknown;
}

/** `{id, type, timestamp, workspace_id, data}`: the same bytes on every attempt. */
export function envelope(event: OutgoingEvent): string {
  return JSON.stringify({
    id: event.id,
    type: event.type,
    timestamp: event.created_at.toISOString(),
    workspace_id: event.workspace_id,
    data: event.data,
  });
}

export function body(format: WebhookFormat, event: OutgoingEvent): string {
  return format === 'slack' ? JSON.stringify({ text: slackText(event) }) : envelope(event);
}

type Data = Record<string, any>;

const money = (usd: unknown) => (typeof usd === 'number' ? `$${usd.toFixed(2)}` : 'unlimited');
const subject = (d: Data) => (d.subject?.type === 'user' ? `user \`${d.subject.id}\`` : 'the workspace');
const actor = (d: Data) => (d.actor ? ` (by ${d.actor.type} ${d.actor.id})` : '');

/** One readable line (or a few) per event, for a person reading a channel. */
export function slackText(event: OutgoingEvent): string {
  const d = (event.data ?? {}) as Data;
  const head = `runguard · ${event.type}`;
  switch (event.type) {
    case 'budget.threshold':
      return `${head}: ${subject(d)} has spent ${money(d.spend_usd)} of its ${money(d.budget_usd)} daily budget on ${d.day} ` +
        `(${Math.round(Number(d.threshold) * 100)}% threshold).`;
    case 'guard.denied':
      return `${head}: ${d.count} denial(s) of ${subject(d)} for ${d.reason} between ${d.window_start} and ${d.window_end}.`;
    case 'kill_switch.changed':
      return `${head}: the kill switch is now ${d.active ? 'ON: every run and step is denied' : 'off'}${actor(d)}.`;
    case 'user.blocked':
    case 'user.unblocked':
      return `${head}: user \`${d.user_id}\` is ${event.type === 'user.blocked' ? 'blocked' : 'unblocked'}${actor(d)}.`;
    case 'settings.changed': {
      const changes = Object.entries((d.changes ?? {}) as Record<string, { before: unknown; after: unknown }>)
        .map(([key, c]) => `${key}: ${JSON.stringify(c.before)} → ${JSON.stringify(c.after)}`).join('; ');
      return `${head}: ${d.subject?.type ?? 'settings'} ${d.subject?.id ?? ''} changed${actor(d)}: ${changes}.`;
    }
    case 'run.failed':
      return `${head}: run ${d.run_id} of user \`${d.user_id}\` failed after ${d.step_count} step(s), ${money(d.total_cost_usd)}.`;
    case 'result.lost':
      return `${head}: the result of step ${d.step_id} (run ${d.run_id}, user \`${d.user_id}\`) was lost: ${d.reason}.`;
    case 'webhook.test':
      return `${head}: this endpoint receives runguard's events.`;
    default:
      return `${head}: ${JSON.stringify(d)}`;
  }
}
