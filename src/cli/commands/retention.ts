/** `runguard retention [DAYS|none]`: how long ended runs are kept; no argument shows it. */
import { Argument, InvalidArgumentError } from 'commander';
import type { Workspace } from '../../contract/index.js';
import { RETENTION_MIN_DAYS as MIN_DAYS } from '../../contract/retention.js';
import { apiCommand, withApi } from '../command.js';
import type { Output } from '../output.js';

function parseDays(text: string): number | null {
  if (/^(none|forever)$/i.test(text)) return null;
  if (!/^\d+$/.test(text) || Number(text) < MIN_DAYS) {
    throw new InvalidArgumentError(
      `must be a whole number of days, at least ${MIN_DAYS} (a retention never reaches this month's runs), or 'none'.`,
    );
  }
  return Number(text);
}

function say(out: Output, days: number | null) {
  out.line(
    days === null
      ? 'Runs are kept forever (no retention).'
      : `Ended runs are deleted ${days} days after they end (checked hourly, in batches).`,
  );
}

export function retentionCommand() {
  return apiCommand(
    'retention',
    `show how long ended runs are kept, or set it in days (at least ${MIN_DAYS}; 'none' = forever)`,
  )
    .addArgument(new Argument('[days]', `days, at least ${MIN_DAYS}, or 'none'`).argParser(parseDays))
    .action(
      withApi(async ({ client, out }, _options, days?: number | null) => {
        const workspace =
          days === undefined
            ? await client.request<Workspace>('GET', '/v1/workspace')
            : await client.request<Workspace>('PATCH', '/v1/workspace', {
                retention_days: days,
              });
        if (out.json) return out.data({ retention_days: workspace.retention_days });
        say(out, workspace.retention_days);
      }),
    );
}
