/**
 * Issue #50, local MCP servers: `runguard mcp wrap` in front of the fixture McpServer over stdio,
 * launched by the official SDK's Client (its StdioClientTransport passes a stripped environment),
 * inside `runguard exec` against a real daemon: the tool calls join exec's run, a denied tool is not
 * listed and a denied call never reaches the server, and the CLI registers servers, tool prices and the tool policy.
 */
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { useCliDaemon } from '../support/cli-daemon.js';
import { BIN, runCli } from '../support/daemon.js';
import { MCP_SERVER_SCRIPT } from '../support/mcp-fixture.js';

const AGENT = fileURLToPath(new URL('../fixtures/mcp-agent.mjs', import.meta.url));

describe('runguard mcp wrap and the MCP commands', () => {
  const fixture = useCliDaemon();

  it("when an agent under exec calls a stdio tool through mcp wrap, then the calls join exec's run, and a denied one never reaches the server", async () => {
    expect((await fixture.cli('tools', 'deny', '*.delete_*')).code).toBe(0);
    expect((await fixture.cli('pricing', 'set-tool', 'fs.echo', '--per-call', '0.002')).code).toBe(0);
    const dir = await mkdtemp(join(tmpdir(), 'rg-mcp-stdio-'));
    const callsFile = join(dir, 'calls.jsonl');
    await writeFile(callsFile, '');
    const result = await runCli(
      [
        'exec',
        '--user',
        'stdio-sam',
        '--',
        process.execPath,
        AGENT,
        BIN,
        MCP_SERVER_SCRIPT,
        'list',
        'echo:{"text":"from stdio"}',
        'delete_file:{"path":"/etc/passwd"}',
      ],
      { ...fixture.env, MCP_CALLS_FILE: callsFile },
    );
    // exec passes MCP_CALLS_FILE to the agent; the agent hands it to the server explicitly.
    expect(result.code, result.stderr).toBe(0);
    const [listed, ...lines] = result.stdout
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map(
        (line) =>
          JSON.parse(line) as {
            tools?: string[];
            content: { text: string }[];
            isError?: boolean;
            _meta?: Record<string, any>;
          },
      );
    // The agent is not offered the tool the policy denies.
    expect(listed!.tools).toContain('echo');
    expect(listed!.tools).not.toContain('delete_file');
    expect(lines[0]!.content[0]!.text).toBe('from stdio');
    expect(lines[1]!.isError).toBe(true);
    expect(lines[1]!._meta?.['runguard/decision']).toMatchObject({
      code: 'TOOL_NOT_ALLOWED',
      detail: { tool: 'fs.delete_file', pattern: '*.delete_*' },
    });
    const runs = (await fixture.api.request('GET', '/v1/runs?user_id=stdio-sam')).body.items as { id: string }[];
    expect(runs).toHaveLength(1);
    const detail = (await fixture.api.request('GET', `/v1/runs/${runs[0]!.id}`)).body;
    expect(detail.status).toBe('COMPLETED');
    expect(detail.steps).toMatchObject([
      {
        type: 'TOOL_CALL',
        tool_name: 'fs.echo',
        status: 'COMPLETED',
        cost_usd: 0.002,
        input_data: { text: 'from stdio' },
      },
      { type: 'TOOL_CALL', tool_name: 'fs.delete_file', status: 'BLOCKED', decision: { reason: 'TOOL_NOT_ALLOWED' } },
    ]);
    // The server ran the allowed call only.
    const seen = (await readFile(callsFile, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { name: string });
    expect(seen.map((call) => call.name)).toEqual(['echo']);
  });

  it("when exec runs a command, then RUNGUARD_MCP_URL is the run's MCP base, carrying its token", async () => {
    const result = await fixture.cli(
      'exec',
      '--user',
      'url-uma',
      '--',
      process.execPath,
      '-e',
      'process.stdout.write(process.env.RUNGUARD_MCP_URL)',
    );
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(new RegExp(`^${fixture.daemon.url}/proxy/t/[^/]+/mcp$`));
  });

  it('when servers are added, listed and removed with the CLI, then the header value is never printed', async () => {
    const added = await fixture.cli(
      'mcp',
      'add',
      'github',
      'http://127.0.0.1:9/mcp',
      '--header',
      'Authorization:Bearer ghp_secret_value_1234',
    );
    expect(added.code, added.stderr).toBe(0);
    const listed = await fixture.cli('mcp', 'list');
    expect(listed.stdout).toContain('github');
    expect(listed.stdout).toContain('********1234');
    expect(listed.stdout).not.toContain('ghp_secret');
    expect((await fixture.cli('mcp', 'remove', 'github')).code).toBe(0);
    expect((await fixture.cli('mcp', 'list')).stdout).toContain('No MCP server is registered.');
  });
});
