/**
 * MCP from the command line (docs/mcp.md): `runguard mcp add|list|remove` for the servers a
 * workspace registers, `runguard mcp wrap` for a local (stdio) server, `runguard tools deny|allow`
 * for the tool policy, and `runguard pricing set-tool|tools` for prices per call.
 */
import { Command, Option } from 'commander';
import type { McpServer, ToolPolicy, ToolPrice, Workspace } from '../../contract/index.js';
import { ApiClient } from '../api-client.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { resolveConnection } from '../connection.js';
import { CliError } from '../errors.js';
import { plainDecimal } from '../output.js';

const collect = (value: string, previous: string[] = []) => [...previous, value];

function headersOf(given: string[] | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const header of given ?? []) {
    const at = header.indexOf(':');
    if (at <= 0) throw new CliError(`--header takes NAME:VALUE, not "${header}".`);
    headers[header.slice(0, at).trim()] = header.slice(at + 1).trim();
  }
  return headers;
}

function addCommand() {
  return apiCommand('add', 'register an MCP server (Streamable HTTP) by name; agents reach it at <mcp url>/<name>')
    .argument('<name>', 'the server name, [a-z0-9_-]{1,64}: tools are named <name>.<tool>')
    .argument('<url>', "the server's endpoint, e.g. https://api.githubcopilot.com/mcp/")
    .addOption(
      new Option('--header <name:value>', 'a header sent with every call (repeatable; stored, shown masked)').argParser(
        collect,
      ),
    )
    .action(
      withApi(async ({ client, out }, options: ApiOptions & { header?: string[] }, name: string, url: string) => {
        const server = await client.request<McpServer>('POST', '/v1/mcp/servers', {
          name,
          url,
          headers: headersOf(options.header),
        });
        if (out.json) return out.data(server);
        out.line(`Registered ${server.name}: ${server.url}`);
        out.line(
          `Agents reach it at $RUNGUARD_MCP_URL/${server.name} under \`runguard exec\`, or <daemon>/mcp/${server.name}.`,
        );
      }),
    );
}

function listCommand() {
  return apiCommand('list', 'the registered MCP servers').action(
    withApi(async ({ client, out }) => {
      const servers = await client.request<McpServer[]>('GET', '/v1/mcp/servers');
      if (out.json) return out.data(servers);
      if (servers.length === 0) return out.line('No MCP server is registered.');
      out.table(
        ['NAME', 'URL', 'HEADERS'],
        servers.map((server) => [
          server.name,
          server.url,
          Object.entries(server.headers)
            .map(([header, value]) => `${header}: ${value}`)
            .join(', ') || '-',
        ]),
      );
    }),
  );
}

function removeCommand() {
  return apiCommand('remove', 'remove an MCP server')
    .argument('<name>', 'the server name')
    .action(
      withApi(async ({ client, out }, _options: ApiOptions, name: string) => {
        await client.request('DELETE', `/v1/mcp/servers/${encodeURIComponent(name)}`);
        if (out.json) return out.data({ name, removed: true });
        out.line(`Removed ${name}.`);
      }),
    );
}

function wrapCommand() {
  return new Command('wrap')
    .description(
      'run a local (stdio) MCP server with its tool calls guarded: inside `runguard exec` they join its run, elsewhere each is a run of RUNGUARD_USER_ID',
    )
    .requiredOption('--server <name>', 'the name its tools are called by (<name>.<tool>)')
    .option('--user <id>', 'the user of calls outside `runguard exec` (env RUNGUARD_USER_ID)')
    .option('--url <url>', 'daemon URL (env RUNGUARD_URL; default the local daemon)')
    .option('--api-key <key>', "API key lg_... (env RUNGUARD_API_KEY; default the local daemon's key file)")
    .argument('<command...>', 'the server command and its arguments, after --')
    .action(async (command: string[], options: { server: string; user?: string; url?: string; apiKey?: string }) => {
      // Loaded here, not at the top: the wrapper is MCP and proxy code no other command needs.
      const { execAncestorEnv, runWrap } = await import('../../mcp/stdio-wrap.js');
      // An MCP client may start this with a stripped environment: exec's run is found through the
      // processes above, and its RUNGUARD_* variables fill in what this environment lacks.
      const env = { ...execAncestorEnv(), ...process.env };
      const runId = env.RUNGUARD_RUN_ID ?? null;
      const userId = options.user ?? env.RUNGUARD_USER_ID ?? null;
      if (runId === null && userId === null)
        throw new CliError(
          'Outside `runguard exec`, mcp wrap needs --user or RUNGUARD_USER_ID: whose tool calls are these?',
        );
      const connection = resolveConnection(options, env);
      const [file, ...args] = command;
      const code = await runWrap({
        server: options.server,
        command: file!,
        args,
        api: new ApiClient({ ...connection, origin: connection }),
        runId,
        userId,
        stdin: process.stdin,
        stdout: process.stdout,
        stderr: process.stderr,
        env: process.env,
      });
      process.exitCode = code;
      // stdin may still be open (the agent's side): the wrap ends with its server.
      process.exit(code);
    });
}

export function mcpCommand(): Command {
  return new Command('mcp')
    .description('MCP servers whose tool calls runguard guards (docs/mcp.md)')
    .addCommand(addCommand())
    .addCommand(listCommand())
    .addCommand(removeCommand())
    .addCommand(wrapCommand());
}

function policyCommand(list: 'deny' | 'allow') {
  const what = list === 'deny' ? 'deny tools matching these patterns' : 'allow only tools matching these patterns';
  return apiCommand(list, `${what} (over <server>.<tool>, * for any run of characters); --clear: no ${list} list`)
    .argument('[patterns...]', 'patterns, e.g. "*.delete_*" github.search_code')
    .option('--clear', `remove the ${list} list`)
    .action(
      withApi(async ({ client, out }, options: ApiOptions & { clear?: boolean }, patterns: string[]) => {
        const before = (await client.request<Workspace>('GET', '/v1/workspace')).tool_policy ?? {
          allow: null,
          deny: null,
        };
        if (!options.clear && patterns.length === 0) throw new CliError(`Name the patterns to ${list}, or --clear.`);
        const policy: ToolPolicy = { ...before, [list]: options.clear ? null : patterns };
        const empty = policy.allow === null && policy.deny === null;
        const after = await client.request<Workspace>('PATCH', '/v1/workspace', { tool_policy: empty ? null : policy });
        if (out.json) return out.data(after.tool_policy);
        const shown = after.tool_policy;
        out.line(`Denied: ${shown?.deny?.join(', ') || 'none'}`);
        out.line(`Allowed: ${shown?.allow ? shown.allow.join(', ') : 'every tool not denied'}`);
      }),
    );
}

export function toolsCommand(): Command {
  return new Command('tools')
    .description("the workspace's tool policy (rule tool_allowed)")
    .addCommand(policyCommand('deny'))
    .addCommand(policyCommand('allow'));
}

/** `runguard pricing set-tool PATTERN --per-call USD` and `pricing tools`. */
export function toolPricingCommands(): Command[] {
  const setTool = apiCommand(
    'set-tool',
    'set the price per call of the tools matching a pattern (the most specific wins)',
  )
    .argument('<pattern>', 'a tool <server>.<tool>, or a pattern such as github.*')
    .requiredOption('--per-call <usd>', 'USD per call, e.g. 0.002')
    .action(
      withApi(async ({ client, out }, options: ApiOptions & { perCall: string }, pattern: string) => {
        const perCall = Number(options.perCall);
        if (!Number.isFinite(perCall) || perCall < 0) throw new CliError('--per-call takes a non-negative USD amount.');
        const price = await client.request<ToolPrice>('PUT', `/v1/tool-pricing/${encodeURIComponent(pattern)}`, {
          per_call_usd: perCall,
        });
        if (out.json) return out.data(price);
        out.line(`${price.pattern}: $${plainDecimal(price.per_call_usd)} per call.`);
      }),
    );
  const tools = apiCommand('tools', 'tool prices per call').action(
    withApi(async ({ client, out }) => {
      const prices = await client.request<ToolPrice[]>('GET', '/v1/tool-pricing');
      if (out.json) return out.data(prices);
      if (prices.length === 0) return out.line('No tool has a price: tool calls cost $0.');
      out.table(
        ['PATTERN', 'PER CALL'],
        prices.map((price) => [price.pattern, `$${plainDecimal(price.per_call_usd)}`]),
      );
    }),
  );
  return [setTool, tools];
}
