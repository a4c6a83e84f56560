/**
 * The fixture MCP server (test/fixtures/mcp-server.mjs, the official SDK's McpServer) as a process
 * of its own, over Streamable HTTP; and the SDK's Client connected through a URL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export const MCP_SERVER_SCRIPT = fileURLToPath(new URL('../fixtures/mcp-server.mjs', import.meta.url));

export interface McpFixture {
  /** The server's Streamable HTTP endpoint. */
  url: string;
  process: ChildProcess;
  /** The tool calls the server ran, in order. */
  calls(): Promise<{ name: string; args: Record<string, unknown> }[]>;
  /** The Authorization and x-upstream-token headers of the last request it got. */
  lastHeaders(): Promise<{ authorization: string | null; token: string | null }>;
  close(): Promise<void>;
}

export async function startMcpServer(options: { json?: boolean } = {}): Promise<McpFixture> {
  const child = spawn(process.execPath, [MCP_SERVER_SCRIPT, '--http', ...(options.json ? ['--json'] : [])], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the fixture MCP server exited (${code})`)));
    createInterface({ input: child.stdout }).once('line', (line) => resolve((JSON.parse(line) as { url: string }).url));
  });
  const origin = new URL(url).origin;
  return {
    url,
    process: child,
    calls: async () => (await fetch(`${origin}/calls`)).json() as never,
    lastHeaders: async () => (await fetch(`${origin}/headers`)).json() as never,
    async close() {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/** The SDK's Client, connected to `url` (the sidecar's MCP URL) with these request headers. */
export async function connectClient(url: string, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'runguard-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}
