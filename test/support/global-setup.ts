/**
 * Runs once per `vitest run`, before any test file, in vitest's own process: no test or hook
 * timeout applies here, which is why the long one-off work belongs here.
 */
import type { TestProject } from 'vitest/node';
import { ensureEmbeddedTemplate } from './embedded-template.js';
import { ensurePostgresTemplate } from './postgres-template.js';
import type {} from './provided-context.js';

export default async function setup(project: TestProject): Promise<void> {
  const [embedded, postgres] = await Promise.all([ensureEmbeddedTemplate(), ensurePostgresTemplate()]);
  project.provide('embeddedTemplate', embedded);
  project.provide('postgresTemplate', postgres);
}
