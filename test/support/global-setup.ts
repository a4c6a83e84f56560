/**
 * Runs once per `vitest run`, before any test file, in vitest's own process: no test or hook
 * timeout applies here, which is why the long one-off work belongs here.
 */
import type { TestProject } from 'vitest/node';
import { ensureEmbeddedTemplate } from './embedded-template.js';
import { dropStaleTemplates, usePostgresTemplate } from './postgres-template.js';
import type {} from './provided-context.js';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const [embedded, postgres] = await Promise.all([ensureEmbeddedTemplate(), usePostgresTemplate()]);
  // Each new migration leaves the last template behind: without this they pile up run after run.
  // Housekeeping only: a failure is said, and the run goes on.
  await dropStaleTemplates(postgres.name).catch((error: unknown) =>
    console.warn(`stale Postgres templates not dropped: ${(error as Error).message}`),
  );
  project.provide('embeddedTemplate', embedded);
  project.provide('postgresTemplate', postgres.name);
  // The teardown: the template is no longer this run's.
  return () => postgres.release();
}
