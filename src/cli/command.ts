/**
 * The shape every API command shares: `--url`, `--api-key` and `--json`, a client resolved from
 * them, and an output. A new command (status, users, budget, limits, keys, ...) is:
 *
 * ```ts
 * export const usersCommand = () =>
 *   apiCommand('users', 'list SDK users').action(withApi(async (ctx) => {
 *     const page = await ctx.client.request<Page<User>>('GET', '/v1/users');
 *     if (ctx.out.json) return ctx.out.data(page);
 *     ctx.out.table(['USER', ...], page.items.map(...));
 *   }));
 * ```
 *
 * then one line in `commands/index.ts`. Errors thrown in the action reach `main`, which prints
 * the server's `detail` and sets the exit status.
 */
import { Command, Option } from 'commander';
import { ApiClient } from './api-client.js';
import { resolveConnection, type Connection } from './connection.js';
import { createOutput, type Output } from './output.js';

export interface ApiOptions {
  url?: string;
  apiKey?: string;
  json?: boolean;
}

export interface CommandContext {
  client: ApiClient;
  connection: Connection;
  out: Output;
  env: NodeJS.ProcessEnv;
}

/** Adds the connection and output options to a command. */
export function withApiOptions(command: Command): Command {
  return command
    .addOption(
      new Option('--url <url>', 'daemon URL (env RUNGUARD_URL; default the local daemon: http://127.0.0.1:<port>)'),
    )
    .addOption(new Option('--api-key <key>', 'API key lg_... (env RUNGUARD_API_KEY; default <data dir>/api-key)'))
    .addOption(new Option('--json', 'print JSON for scripts instead of tables'));
}

export function apiCommand(name: string, description: string): Command {
  return withApiOptions(new Command(name).description(description));
}

/**
 * Wraps an action: the last two commander arguments are the options and the command; the ones
 * before are the positional arguments.
 */
export function withApi<A extends unknown[], O extends ApiOptions>(
  fn: (ctx: CommandContext, options: O, ...args: A) => Promise<void> | void,
): (...raw: unknown[]) => Promise<void> {
  return async (...raw: unknown[]) => {
    const command = raw[raw.length - 1] as Command;
    const options = command.opts<O>();
    const args = raw.slice(0, -2) as A;
    const env = process.env;
    const connection = resolveConnection(options, env);
    const ctx: CommandContext = {
      client: new ApiClient({ ...connection, origin: connection }),
      connection,
      out: createOutput(options.json === true),
      env,
    };
    await fn(ctx, options, ...args);
  };
}
