import { defineConfig } from 'vitest/config';
import SlowestFilesReport from './test/support/slowest-files-report.js';
import SlowestFirst from './test/support/slowest-first.js';

/**
 * Files that run in a fresh process each: one that mocks a module with `vi.mock` (the mock must
 * reach the modules under test, which a worker shared with other files may have loaded unmocked
 * already), and one that measures the process itself (its heap, which other files' leftovers share).
 */
const OWN_PROCESS = ['test/security/owasp.test.ts', 'test/daemon/idle-memory.test.ts'];

export default defineConfig({
  test: {
    // After each file, the Redis keys its tests wrote are deleted.
    setupFiles: ['test/support/redis-cleanup.ts'],
    // Before any file: the migrated embedded and Postgres databases that test stores are copied from.
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    // Two cores: more workers only add contention with Postgres and Redis.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // The slowest files start first, on a fresh clone too (test/support/slowest-first.ts).
    sequence: { sequencer: SlowestFirst },
    // A run of many files ends with its slowest, slowest first (test/support/slowest-files-report.ts).
    reporters: ['default', new SlowestFilesReport()],
    projects: [
      {
        extends: true,
        test: {
          name: 'shared',
          include: ['test/**/*.test.ts'],
          exclude: OWN_PROCESS,
          // A worker runs file after file with the modules it loaded (src/, the support, fastify,
          // pg, ...): a fresh process per file spent more time importing them than most files spend
          // testing. Each file still gets its own database, Redis prefix and servers, closed in its
          // afterAll; vitest restores spies and mocks between files.
          isolate: false,
        },
      },
      { extends: true, test: { name: 'own-process', include: OWN_PROCESS } },
    ],
  },
});
