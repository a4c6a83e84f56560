/** `runguard keys list|regenerate`: the workspace's API keys. */
import { Command, Option } from 'commander';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { timestamp } from '../output.js';

interface ApiKey {
  id: string;
  prefix: string;
  name: string | null;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

export function keysCommand(): Command {
  const keys = new Command('keys').description("the workspace's API keys");
  keys.addCommand(
    apiCommand('list', 'keys with their prefix and use (never a secret)').action(withApi(async ({ client, out }) => {
      const list = await client.request<ApiKey[]>('GET', '/v1/api-keys');
      if (out.json) return out.data(list);
      out.table(['PREFIX', 'NAME', 'CREATED', 'LAST USED', 'STATE'], list.map((k) => [
        `lg_${k.prefix}_…`, k.name, timestamp(k.created_at), timestamp(k.last_used_at), k.revoked_at ? `revoked ${timestamp(k.revoked_at)}` : 'active',
      ]));
    })),
  );
  keys.addCommand(
    apiCommand('regenerate', 'issue a new key and revoke every earlier one at once')
      .addOption(new Option('--yes', 'confirm: clients using the current key stop working'))
      .action(withApi(async ({ client, out }, o: ApiOptions & { yes?: boolean }) => {
        if (!o.yes) throw new Error('regenerating revokes the current key for every client; run again with --yes');
        const key = await client.request<{ id: string; prefix: string; api_key: string }>('POST', '/v1/api-keys/regenerate');
        if (out.json) return out.data(key);
        out.line(`New API key (shown once): ${key.api_key}`);
        out.line('Every earlier key of the workspace is revoked.');
      })),
  );
  return keys;
}
