import { defineConfig } from 'vitest/config';

/**
 * `npm run test:unit`: the tests that need no service (no Postgres, no Redis, no build), for a
 * quick loop while editing. They live under test/unit/ (test/unit/build/test-kinds.test.ts fails
 * when one imports what starts a service); `npm test` (vitest.config.ts) runs them with the rest.
 */
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts'],
    // No setup file: the full suite's deletes Redis keys after each file.
    pool: 'forks',
    // Files share a worker and the modules it loaded, as in vitest.config.ts's `shared` project.
    isolate: false,
    maxWorkers: 2,
    testTimeout: 30_000,
  },
});
