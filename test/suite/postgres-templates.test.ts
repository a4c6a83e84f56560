/**
 * The migrated Postgres templates the tests copy their databases from (test/support/
 * postgres-template.ts): a run's global setup drops those of other migrations, which each new
 * migration leaves behind, but never the current one, nor one another run is using.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { dropStaleTemplates } from '../support/postgres-template.js';
import { admin, ADMIN_DATABASE_URL } from '../support/services.js';

const exists = (name: string) =>
  admin((c) => c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).then((r) => r.rowCount === 1);

describe('stale Postgres templates', () => {
  it('when templates of other migrations are left, then they are dropped, but not one a run uses, nor the current one', async () => {
    const current = inject('postgresTemplate');
    const [stale, used] = [0, 1].map(() => `rg_template_${randomBytes(8).toString('hex')}`) as [string, string];
    for (const name of [stale, used]) await admin((c) => c.query(`CREATE DATABASE ${name}`));
    // Another run at other migrations, holding its template as usePostgresTemplate does.
    const otherRun = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
    await otherRun.connect();
    try {
      await otherRun.query('SELECT pg_advisory_lock_shared(hashtextextended($1, 0))', [used]);
      const dropped = await dropStaleTemplates(current);
      expect(dropped).toContain(stale);
      expect(dropped).not.toContain(used);
      expect(dropped).not.toContain(current);
      expect([await exists(stale), await exists(used), await exists(current)]).toEqual([false, true, true]);
    } finally {
      await otherRun.end();
      await admin((c) => c.query(`DROP DATABASE IF EXISTS ${used}`));
    }
  });
});
