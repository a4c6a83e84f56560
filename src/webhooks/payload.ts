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
const subject = (data: Data) =>
  data.subject?.type && data.subject.type !== 'workspace'
    ? `${data.subject.type} \`${data.subject.id ?? ''}\``
    : 'the workspace';
const PERIODLY: Record<string, string> = { day: 'daily', week: 'weekly', month: 'monthly' };
const actor = (data: Data) => (data.actor ? ` (by ${data.actor.type} ${data.actor.id})` : '');

/** One readable line (or a few) per event, for a person reading a channel. */
export function slackText(event: OutgoingEvent): string {
  const data = (event.data ?? {}) as Data;
  const field = (key: string) => text(data[key]);
  const head = `runguard · ${event.type}`;
  switch (event.type) {
    case 'budget.threshold':
      if (data.budget_id !== undefined) {
        return (
          `${head}: ${subject(data)} has spent ${money(data.spend_usd)} of its ${money(data.budget_usd)} ` +
          `${PERIODLY[field('period')] ?? field('period')} budget (${field('action')}) since ${field('window_start')} ` +
          `(${Math.round(Number(data.threshold) * 100)}% threshold); it resets at ${field('resets_at')}.`
        );
      }
      return (
        `${head}: ${subject(data)} has spent ${money(data.spend_usd)} of its ${money(data.budget_usd)} daily budget on ${field('day')} ` +
        `(${Math.round(Number(data.threshold) * 100)}% threshold).`
      );
    case 'guard.denied':
      if (data.first === true) {
        return `${head}: ${subject(data)} was denied for ${field('reason')} at ${field('first_at')} (more in this window are counted at ${field('window_end')}).`;
      }
      return `${head}: ${field('count')} denial(s) of ${subject(data)} for ${field('reason')} between ${field('window_start')} and ${field('window_end')}.`;
    case 'tool.denied':
      if (data.first === true) {
        return `${head}: a call of tool \`${field('tool')}\` by ${subject(data)} was denied for ${field('reason')} at ${field('first_at')} (more in this window are counted at ${field('window_end')}).`;
      }
      return `${head}: ${field('count')} denied call(s) of tool \`${field('tool')}\` by ${subject(data)} for ${field('reason')} between ${field('window_start')} and ${field('window_end')}.`;
    case 'kill_switch.changed':
      return `${head}: the kill switch is now ${data.active ? 'ON: every run and step is denied' : 'off'}${actor(data)}.`;
    case 'user.blocked':
    case 'user.unblocked':
      return `${head}: user \`${field('user_id')}\` is ${event.type === 'user.blocked' ? 'blocked' : 'unblocked'}${actor(data)}.`;
    case 'settings.changed': {
      const changes = Object.entries(data.changes ?? {})
        .map(([key, change]) => `${key}: ${JSON.stringify(change.before)} → ${JSON.stringify(change.after)}`)
        .join('; ');
      return `${head}: ${data.subject?.type ?? 'settings'} ${data.subject?.id ?? ''} changed${actor(data)}: ${changes}.`;
    }
    case 'run.failed':
      return `${head}: run ${field('run_id')} of user \`${field('user_id')}\` failed after ${field('step_count')} step(s), ${money(data.total_cost_usd)}.`;
    case 'result.lost':
      return `${head}: the result of step ${field('step_id')} (run ${field('run_id')}, user \`${field('user_id')}\`) was lost: ${field('reason')}.`;
    case 'webhook.test':
      return `${head}: this endpoint receives runguard's events.`;
    default:
      return `${head}: ${JSON.stringify(data)}`;
  }
}
