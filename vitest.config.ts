import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // After each file, the Redis keys its tests wrote are deleted.
    setupFiles: ['test/support/redis-cleanup.ts'],
    // Before any file: the migrated embedded database that embedded test stores are copied from.
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    // Two cores: more workers only add contention with Postgres and Redis.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
