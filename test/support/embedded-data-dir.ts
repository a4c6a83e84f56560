/**
 * A data directory whose embedded database is a copy of the migrated template
 * (embedded-template.ts), where `runguard` and the daemon look for it: `<data dir>/pgdata`. For
 * tests of anything but a first start, which would otherwise pay PGlite's initdb and every
 * migration (tens of seconds on a busy two-core machine) inside their own timeout.
 */
import { cp } from 'node:fs/promises';
import { join } from 'node:path';
import { inject } from 'vitest';

export async function copyEmbeddedTemplate(dataDir: string): Promise<void> {
  const template = inject('embeddedTemplate') as string | undefined;
  if (!template) throw new Error('No embedded template: run under vitest.config.ts, whose globalSetup builds it.');
  await cp(template, join(dataDir, 'pgdata'), { recursive: true });
}
