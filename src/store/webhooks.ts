/**
 * Webhook endpoints. An event is inserted with one pending delivery per enabled endpoint subscribed
 * to its type, in the caller's transaction (webhook-outbox.ts); daemons claim endpoints by lease
 * and work through each endpoint's queue in event order (webhook-deliveries.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Queryable } from './db.js';

export type WebhookFormat = 'standard' | 'slack';

export interface EndpointRow {
  id: string;
  workspace_id: string;
  url: string;
  description: string | null;
  events: string[];
  format: WebhookFormat;
  secret: string;
  enabled: boolean;
  disabled_reason: string | null;
  created_at: Date;
  updated_at: Date;
}

function toEndpoint(row: Record<string, unknown>): EndpointRow {
  return {
    id: String(row.id),
    workspace_id: String(row.workspace_id),
    url: String(row.url),
    description: (row.description as string | null) ?? null,
    events: row.events as string[],
    format: row.format as WebhookFormat,
    secret: String(row.secret),
    enabled: Boolean(row.enabled),
    disabled_reason: (row.disabled_reason as string | null) ?? null,
    created_at: row.created_at as Date,
    updated_at: row.updated_at as Date,
  };
}

export interface NewEndpoint {
  workspaceId: string;
  url: string;
  description: string | null;
  events: string[];
  format: WebhookFormat;
  secret: string;
}

export async function insertEndpoint(db: Queryable, endpoint: NewEndpoint, now: Date): Promise<EndpointRow> {
  const { rows } = await db.query(
    `INSERT INTO webhook_endpoints (id, workspace_id, url, description, events, format, secret, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING *`,
    [
      randomUUID(),
      endpoint.workspaceId,
      endpoint.url,
      endpoint.description,
      endpoint.events,
      endpoint.format,
      endpoint.secret,
      now,
    ],
  );
  return toEndpoint(rows[0]!);
}

export async function listEndpoints(db: Queryable, workspaceId: string): Promise<EndpointRow[]> {
  const { rows } = await db.query('SELECT * FROM webhook_endpoints WHERE workspace_id = $1 ORDER BY created_at, id', [
    workspaceId,
  ]);
  return rows.map(toEndpoint);
}

export async function getEndpoint(db: Queryable, workspaceId: string, id: string): Promise<EndpointRow | null> {
  const { rows } = await db.query('SELECT * FROM webhook_endpoints WHERE workspace_id = $1 AND id = $2', [
    workspaceId,
    id,
  ]);
  return rows[0] ? toEndpoint(rows[0]) : null;
}

/** Any endpoint, by id alone: for the dispatcher, which works across workspaces. */
export async function endpointById(db: Queryable, id: string): Promise<EndpointRow | null> {
  const { rows } = await db.query('SELECT * FROM webhook_endpoints WHERE id = $1', [id]);
  return rows[0] ? toEndpoint(rows[0]) : null;
}

export interface EndpointChanges {
  url?: string;
  description?: string | null;
  events?: string[];
  format?: WebhookFormat;
  enabled?: boolean;
}

const CHANGEABLE = ['url', 'description', 'events', 'format', 'enabled'] as const;

export async function updateEndpoint(
  db: Queryable,
  workspaceId: string,
  id: string,
  changes: EndpointChanges,
  now: Date,
): Promise<EndpointRow | null> {
  const columns = CHANGEABLE.filter((column) => changes[column] !== undefined);
  const sets = columns.map((column, i) => `${column} = $${i + 4}`);
  // Enabled again by hand: the reason it was disabled no longer stands.
  if (changes.enabled === true) sets.push('disabled_reason = NULL');
  const { rows } = await db.query(
    `UPDATE webhook_endpoints SET ${[...sets, 'updated_at = $3'].join(', ')} WHERE workspace_id = $1 AND id = $2 RETURNING *`,
    [workspaceId, id, now, ...columns.map((column) => changes[column])],
  );
  return rows[0] ? toEndpoint(rows[0]) : null;
}

export async function deleteEndpoint(db: Queryable, workspaceId: string, id: string): Promise<boolean> {
  const { rowCount } = await db.query('DELETE FROM webhook_endpoints WHERE workspace_id = $1 AND id = $2', [
    workspaceId,
    id,
  ]);
  return rowCount > 0;
}
