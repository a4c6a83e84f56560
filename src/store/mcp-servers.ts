/** The MCP servers a workspace registered by name (migration 20). */
import type { Queryable } from './db.js';

export interface McpServerRow {
  name: string;
  url: string;
  /** Sent with every call to the server; secrets. */
  headers: Record<string, string>;
  created_at: Date;
}

const toRow = (row: Record<string, unknown>): McpServerRow => ({
  name: String(row.name),
  url: String(row.url),
  headers: (row.headers ?? {}) as Record<string, string>,
  created_at: row.created_at as Date,
});

/** Registers the server, or replaces the one of that name; answers it. */
export async function putMcpServer(
  db: Queryable,
  workspaceId: string,
  server: { name: string; url: string; headers: Record<string, string> },
  now: Date,
): Promise<McpServerRow> {
  const { rows } = await db.query(
    `INSERT INTO mcp_servers (workspace_id, name, url, headers, created_at) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (workspace_id, name) DO UPDATE SET url = EXCLUDED.url, headers = EXCLUDED.headers
     RETURNING name, url, headers, created_at`,
    [workspaceId, server.name, server.url, JSON.stringify(server.headers), now],
  );
  return toRow(rows[0]!);
}

export async function getMcpServer(db: Queryable, workspaceId: string, name: string): Promise<McpServerRow | null> {
  const { rows } = await db.query(
    'SELECT name, url, headers, created_at FROM mcp_servers WHERE workspace_id = $1 AND name = $2',
    [workspaceId, name],
  );
  return rows[0] ? toRow(rows[0]) : null;
}

export async function listMcpServers(db: Queryable, workspaceId: string): Promise<McpServerRow[]> {
  const { rows } = await db.query(
    'SELECT name, url, headers, created_at FROM mcp_servers WHERE workspace_id = $1 ORDER BY name',
    [workspaceId],
  );
  return rows.map(toRow);
}

/** Whether a server of that name was there to delete. */
export async function deleteMcpServer(db: Queryable, workspaceId: string, name: string): Promise<boolean> {
  const { rowCount } = await db.query('DELETE FROM mcp_servers WHERE workspace_id = $1 AND name = $2', [
    workspaceId,
    name,
  ]);
  return (rowCount ?? 0) > 0;
}
