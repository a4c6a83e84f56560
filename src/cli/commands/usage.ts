/** `runguard usage report`: spend between two local dates, grouped, as a table, JSON or CSV. */
import { Command, Option } from 'commander';
import type { SpendReport } from '../../contract/index.js';
import { REPORT_GROUPS } from '../../contract/report-groups.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { usd } from '../output.js';

interface ReportOptions extends ApiOptions {
  from: string;
  to: string;
  groupBy: string;
  csv?: boolean;
}

export function usageCommand(): Command {
  const usage = new Command('usage').description('spend reports over a range of days');
  usage.addCommand(
    apiCommand('report', "spend by user, key, model or day between two dates (the workspace's time zone)")
      .requiredOption('--from <date>', 'first day, YYYY-MM-DD (included)')
      .requiredOption('--to <date>', 'last day, YYYY-MM-DD (included)')
      .addOption(
        new Option('--group-by <group>', `what a row is: ${REPORT_GROUPS.join(', ')}, tag:NAME`).makeOptionMandatory(),
      )
      .option('--csv', 'print CSV (key,spend_usd,tokens,calls,unpriced_calls) as the daemon writes it')
      .action(
        withApi(async ({ client, out }, options: ReportOptions) => {
          const query = new URLSearchParams({ from: options.from, to: options.to, group_by: options.groupBy });
          const path = `/v1/usage/report?${query.toString()}`;
          if (options.csv) {
            process.stdout.write(await client.text(path, 'text/csv'));
            return;
          }
          const report = await client.request<SpendReport>('GET', path);
          if (out.json) return out.data(report);
          const figures = (row: SpendReport['total']) => [
            usd(row.spend_usd),
            row.tokens,
            row.calls,
            row.unpriced_calls,
          ];
          out.table(
            [report.group_by.toUpperCase(), 'SPEND', 'TOKENS', 'CALLS', 'UNPRICED'],
            [...report.rows.map((row) => [row.key, ...figures(row)]), ['TOTAL', ...figures(report.total)]],
          );
        }),
      ),
  );
  return usage;
}
