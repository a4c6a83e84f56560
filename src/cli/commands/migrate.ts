/** `runguard migrate`: brings the configured database's schema up to date, then exits. */
import { Command, Option } from 'commander';
import { loadConfig } from '../../config.js';
import { createOutput } from '../output.js';

export function migrateCommand(): Command {
  return new Command('migrate')
    .description(
      'apply pending schema migrations to the configured database (DATABASE_URL, else the embedded one) and exit',
    )
    .addOption(new Option('--data-dir <dir>', "the embedded database's data directory (env RUNGUARD_DATA_DIR)"))
    .addOption(new Option('--json', 'print JSON for scripts'))
    .action(async (options: { dataDir?: string; json?: boolean }) => {
      const config = loadConfig(process.env, { dataDir: options.dataDir });
      const out = createOutput(options.json === true);
      const [{ openDb }, { maxAppliedVersion, migrate }] = await Promise.all([
        import('../../daemon/stores.js'),
        import('../../store/migrations.js'),
      ]);
      const db = await openDb(config);
      try {
        const applied = await migrate(db);
        const version = await maxAppliedVersion(db);
        if (out.json) return out.data({ database: db.kind, applied, version });
        out.line(
          applied.length
            ? `Applied migration${applied.length > 1 ? 's' : ''} ${applied.join(', ')} to the ${db.kind} database; schema version ${version}.`
            : `The ${db.kind} database is up to date (schema version ${version}).`,
        );
      } finally {
        await db.close();
      }
    });
}
