/**
 * Runs once per `vitest run`, before any test file, in vitest's own process: no test or hook
 * timeout applies here, which is why the long one-off work belongs here.
 */
import type { TestProject } from 'vitest/node';
import { ensureEmbeddedTemplate } from './embedded-template.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The migrated embedded data directory that `openTestStores('embedded')` copies. */
    embeddedTemplate: string;
  }
}

export default async function setup(project: TestProject): Promise<void> {
  project.provide('embeddedTemplate', await ensureEmbeddedTemplate());
}
