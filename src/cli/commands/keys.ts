/** `runguard keys list|create|regenerate|revoke`: the workspace's API keys. */
import { readFile } from 'node:fs/promises';
import { Argument, Command, Option } from 'commander';
import { cliCommand } from '../../cli-command.js';
import type { ApiKey, Budget, CreatedApiKey, IssuedApiKey } from '../../contract/index.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { timestamp } from '../output.js';

export function keysCommand(): Command {
  const keys = new Command('keys').description("the workspace's API keys");
  keys.addCommand(
    apiCommand('list', 'keys with their prefix and use (never a secret)').action(
      withApi(async ({ client, out }) => {
        const list = await client.request<ApiKey[]>('GET', '/v1/api-keys');
        if (out.json) return out.data(list);
        out.table(
          ['PREFIX', 'NAME', 'ROLE', 'CREATED', 'LAST USED', 'STATE'],
          list.map((key) => [
            `lg_${key.prefix}_…`,
            key.name,
            key.role,
            timestamp(key.created_at),
            timestamp(key.last_used_at),
            key.revoked_at ? `revoked ${timestamp(key.revoked_at)}` : 'active',
          ]),
        );
      }),
    ),
  );
  keys.addCommand(
    apiCommand('create', 'issue one more key (shown once); an agent key may only run, never change settings')
      .requiredOption('--name <name>', 'what the key is for, e.g. ci-bot')
      .addOption(
        new Option('--role <role>', 'admin: everything; agent: runs and steps only')
          .choices(['admin', 'agent'])
          .default('admin'),
      )
      .option(
        '--budget <usd/period>',
        'cap what the key spends: USD per day, week or month, e.g. 5/day (repeat for several periods)',
        (value: string, previous: string[] = []) => [...previous, value],
      )
      .action(
        withApi(async ({ client, out }, options: ApiOptions & { name: string; role: string; budget?: string[] }) => {
          // Every budget is read before the key is issued: a bad one issues nothing.
          const budgets = (options.budget ?? []).map(keyBudget);
          const key = await client.request<CreatedApiKey>('POST', '/v1/api-keys', {
            name: options.name,
            role: options.role,
          });
          const created: Budget[] = [];
          try {
            for (const budget of budgets)
              created.push(
                await client.request<Budget>('POST', '/v1/budgets', { scope: 'key', subject: key.id, ...budget }),
              );
          } catch (error) {
            // The key exists, and its secret is shown only now: say it before the failure.
            out.line(`New ${key.role} key "${key.name}" (shown once): ${key.api_key}`);
            throw error;
          }
          if (out.json) return out.data({ ...key, budgets: created });
          out.line(`New ${key.role} key "${key.name}" (shown once): ${key.api_key}`);
          for (const budget of created)
            out.line(`Budget ${budget.id}: the key may spend $${budget.limit_usd} a ${budget.period}.`);
        }),
      ),
  );
  keys.addCommand(
    apiCommand('regenerate', 'issue a new key and revoke every earlier one at once')
      .addOption(new Option('--yes', 'confirm: clients using the current key stop working'))
      .action(
        withApi(async ({ client, connection, out }, options: ApiOptions & { yes?: boolean }) => {
          if (!options.yes)
            throw new Error('regenerating revokes the current key for every client; run again with --yes');
          const key = await client.request<IssuedApiKey>('POST', '/v1/api-keys/regenerate');
          if (out.json) return out.data(key);
          out.line(`New API key (shown once): ${key.api_key}`);
          out.line('Every earlier key of the workspace is revoked.');
          // The daemon keeps its key file up to date; a file of another daemon's data directory it cannot.
          if (connection.keyFile) {
            const kept = await readFile(connection.keyFile, 'utf8').then(
              (text) => text.trim(),
              () => null,
            );
            out.line(
              kept === key.api_key
                ? `The daemon saved it in ${connection.keyFile}, which the CLI and ${cliCommand('exec')} read.`
                : `${connection.keyFile} still holds the revoked key: put the new one there, or pass --api-key.`,
            );
          }
          // A variable of this shell would go on overriding the file with the revoked key.
          if (connection.keySource === 'RUNGUARD_API_KEY') {
            out.warn(
              'RUNGUARD_API_KEY in this shell holds the revoked key: export the new one, or unset it to use the key file.',
            );
          }
        }),
      ),
  );
  keys.addCommand(
    apiCommand(
      'revoke',
      `revoke one key by its id (\`${cliCommand('keys list --json')}\` shows ids); never the workspace's last active key`,
    )
      .addArgument(new Argument('<id>', 'the key id'))
      .action(
        withApi(async ({ client, connection, out }, _o: ApiOptions, id: string) => {
          // Read before: once revoked, the CLI's own key may be the one that no longer works.
          const listed = await client.request<ApiKey[]>('GET', '/v1/api-keys');
          const own =
            listed.find((listedKey) => listedKey.id === id.toLowerCase())?.prefix === connection.apiKey.split('_')[1];
          await client.request('DELETE', `/v1/api-keys/${encodeURIComponent(id)}`);
          if (out.json) return out.data({ id, revoked: true });
          out.line(`Key ${id} is revoked: clients using it get 401 from now on.`);
          if (own) out.warn(`that is the key this CLI used (from ${connection.keySource}): give it another key.`);
        }),
      ),
  );
  return keys;
}

/** A `--budget` value, `5/day` (or `$5/week`, `0.5/month`), as a key budget's period and limit. */
export function keyBudget(value: string): { period: 'day' | 'week' | 'month'; limit_usd: number } {
  const match = /^\$?(\d+(?:\.\d+)?)\/(day|week|month)$/.exec(value.trim());
  if (!match) throw new Error(`--budget must be USD per period, e.g. 5/day, 20/week or 100/month; not "${value}"`);
  return { period: match[2] as 'day' | 'week' | 'month', limit_usd: Number(match[1]) };
}
