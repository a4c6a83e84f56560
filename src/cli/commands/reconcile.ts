/**
 * `runguard reconcile`: recounts the daily usage counters and the run list's counts from the run
 * and step records of the configured database, reports every difference, and repairs it (unless
 * --dry-run). The run counts read every run (the daemon's periodic reconcile leaves them out).
 * It never migrates (a daemon's start or `runguard migrate` does): a schema behind or ahead of
 * this runguard's is refused before anything is read.
 */
import { Command, Option } from 'commander';
import { cliCommand } from '../../cli-command.js';
import { loadConfig } from '../../config.js';
import type { Db } from '../../store/db.js';
import { CliError } from '../errors.js';
import { createOutput } from '../output.js';

/** Opens nothing more unless the schema is the one this runguard's migrations leave. */
async function requireCurrentSchema(db: Db): Promise<void> {
  const { schemaStatus } = await import('../../store/migrations.js');
  const status = await schemaStatus(db);
  if (status.unknown.length > 0) {
    throw new CliError(
      `the database schema is at version ${Math.max(...status.unknown)}, newer than this runguard's ${status.expected} ` +
        `(a newer runguard migrated it): run that version's \`${cliCommand('reconcile')}\` instead`,
    );
  }
  if (status.pending.length > 0) {
    throw new CliError(
      `the database schema is at version ${status.version}, this runguard expects ${status.expected}: run \`${cliCommand('migrate')}\` first`,
    );
  }
}

export function reconcileCommand(): Command {
  return new Command('reconcile')
    .description(
      'check the counters against the records (DATABASE_URL, else the embedded database), report and repair drift',
    )
    .addOption(new Option('--days <n>', 'how many UTC days back to check').default('2'))
    .addOption(new Option('--dry-run', 'report only; change nothing'))
    .addOption(new Option('--data-dir <dir>', "the embedded database's data directory (env RUNGUARD_DATA_DIR)"))
    .addOption(new Option('--json', 'print JSON for scripts'))
    .action(async (options: { days: string; dryRun?: boolean; dataDir?: string; json?: boolean }) => {
      const days = Number(options.days);
      if (!Number.isInteger(days) || days < 1 || days > 366)
        throw new Error('--days must be a whole number from 1 to 366');
      const config = loadConfig(process.env, { dataDir: options.dataDir });
      const out = createOutput(options.json === true);
      const [{ openStores }, { reconcile }] = await Promise.all([
        import('../../daemon/stores.js'),
        import('../../jobs/reconcile.js'),
      ]);
      const stores = await openStores(config, undefined, { schema: requireCurrentSchema });
      try {
        const report = await reconcile(stores.db, stores.counters, {
          now: new Date(),
          days,
          repair: !options.dryRun,
          runCounts: true,
        });
        // Drift left in place exits 4, for scripts reading JSON as for people reading the table.
        if (!report.repaired && report.drifts.length > 0) process.exitCode = 4;
        if (out.json) return out.data(report);
        if (report.drifts.length === 0)
          return out.line(`No drift since ${report.checkedFrom}: the counters equal the records.`);
        out.table(
          ['KIND', 'KEY', 'EXPECTED (RECORDS)', 'FOUND'],
          report.drifts.map((drift) => [drift.kind, drift.key, drift.expected, drift.found]),
        );
        out.line(
          `${report.drifts.length} difference${report.drifts.length > 1 ? 's' : ''} since ${report.checkedFrom}; ${report.repaired ? 'repaired.' : 'nothing changed (--dry-run).'}`,
        );
      } finally {
        await stores.close();
      }
    });
}
