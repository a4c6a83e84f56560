/**
 * The MCP servers of a workspace, as the API registers, lists and removes them. A server's URL is
 * checked where it may point (outbound-policy.ts) when it is registered, and again at every
 * connection; its header values are secrets, answered masked.
 */
import type { McpServer, McpServerBody } from '../contract/index.js';
import type { Clock } from '../clock.js';
import { ApiError } from '../errors.js';
import type { Db } from '../store/db.js';
import {
  deleteMcpServer,
  getMcpServer,
  listMcpServers,
  putMcpServer,
  type McpServerRow,
} from '../store/mcp-servers.js';
import { checkUrlForm, OutboundRefused, resolveAllowed, type OutboundPolicy } from '../webhooks/outbound-policy.js';

/** A secret as the API shows it: its last four characters at most, never more than a quarter of it. */
export function maskSecret(value: string): string {
  const shown = Math.min(4, Math.floor(value.length / 4));
  return `${'*'.repeat(8)}${shown > 0 ? value.slice(-shown) : ''}`;
}

export function serverView(row: McpServerRow): McpServer {
  return {
    name: row.name,
    url: row.url,
    headers: Object.fromEntries(Object.entries(row.headers).map(([name, value]) => [name, maskSecret(value)])),
    created_at: row.created_at.toISOString(),
  };
}

export class McpServerRegistry {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly policy: OutboundPolicy,
  ) {}

  async register(workspaceId: string, body: McpServerBody): Promise<McpServer> {
    try {
      const url = checkUrlForm(body.url);
      await resolveAllowed(url, this.policy);
    } catch (error) {
      if (error instanceof OutboundRefused) throw new ApiError('BAD_REQUEST', error.message);
      // A name that does not resolve now may later; the connection is checked again then.
      if ((error as { code?: string }).code !== 'ENOTFOUND') throw error;
    }
    const headers = Object.fromEntries(Object.entries(body.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]));
    return serverView(
      await putMcpServer(this.db, workspaceId, { name: body.name, url: body.url, headers }, this.clock.now()),
    );
  }

  async list(workspaceId: string): Promise<McpServer[]> {
    return (await listMcpServers(this.db, workspaceId)).map(serverView);
  }

  /** The server with its headers in full, for the proxy; null: none of that name. */
  find(workspaceId: string, name: string): Promise<McpServerRow | null> {
    return getMcpServer(this.db, workspaceId, name);
  }

  async remove(workspaceId: string, name: string): Promise<void> {
    if (!(await deleteMcpServer(this.db, workspaceId, name)))
      throw new ApiError('NOT_FOUND', `The workspace has no MCP server named "${name}".`);
  }
}
