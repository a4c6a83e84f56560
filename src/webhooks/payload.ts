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

/** What the sentences read of an event's data; any of it may be absent. */
interface Data {
  subject?: { type?: string; id?: string };
  actor?: { type: string; id: string };
  changes?: Record<string, { before: unknown; after: unknown }>;
  [key: string]: unknown;
}

const text = (value: unknown) =>
  typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean'
    ? String(value)
    : JSON.stringify(value);
const money = (usd: unknown) => (typeof usd === 'number' ? `$${usd.toFixed(2)}` : 'unlimited');
const subject = (d: Data) => (d.subject?.type === 'user' ? `user \`${d.subject.id ?? ''}\`` : 'the workspace');
const actor = (d: Data) => (d.actor ? ` (by ${d.actor.type} ${d.actor.id})` : '');

/** One readable line (or a few) per event, for a person reading a channel. */
export function slackText(event: OutgoingEvent): string {
  const d = (event.data ?? {}) as Data;
  const t = (key: string) => text(d[key]);
  const head = `runguard · ${event.type}`;
  switch (event.type) {
    case 'budget.threshold':
      return (
        `${head}: ${subject(d)} has spent ${money(d.spend_usd)} of its ${money(d.budget_usd)} daily budget on ${t('day')} ` +
        `(${Math.round(Number(d.threshold) * 100)}% threshold).`
      );
    case 'guard.denied':
      return `${head}: ${t('count')} denial(s) of ${subject(d)} for ${t('reason')} between ${t('window_start')} and ${t('window_end')}.`;
    case 'kill_switch.changed':
      return `${head}: the kill switch is now ${d.active ? 'ON: every run and step is denied' : 'off'}${actor(d)}.`;
    case 'user.blocked':
    case 'user.unblocked':
      return `${head}: user \`${t('user_id')}\` is ${event.type === 'user.blocked' ? 'blocked' : 'unblocked'}${actor(d)}.`;
    case 'settings.changed': {
      const changes = Object.entries(d.changes ?? {})
        .map(([key, c]) => `${key}: ${JSON.stringify(c.before)} → ${JSON.stringify(c.after)}`)
        .join('; ');
      return `${head}: ${d.subject?.type ?? 'settings'} ${d.subject?.id ?? ''} changed${actor(d)}: ${changes}.`;
    }
    case 'run.failed':
      return `${head}: run ${t('run_id')} of user \`${t('user_id')}\` failed after ${t('step_count')} step(s), ${money(d.total_cost_usd)}.`;
    case 'result.lost':
      return `${head}: the result of step ${t('step_id')} (run ${t('run_id')}, user \`${t('user_id')}\`) was lost: ${t('reason')}.`;
    case 'webhook.test':
      return `${head}: this endpoint receives runguard's events.`;
    default:
      return `${head}: ${JSON.stringify(d)}`;
  }
}
