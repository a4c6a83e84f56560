import { defineConfig } from 'vitest/config';

/**
 * `npm run test:unit`: the tests that need no service (no Postgres, no Redis, no build), for a
 * quick loop while editing. `npm test` (vitest.config.ts) stays the whole suite, these included.
 * A file belongs here only when it starts nothing but loopback fakes: add it by name.
 */
export default defineConfig({
  test: {
    include: [
      'test/unit/**/*.test.ts',
      'test/rules/**/*.test.ts',
      'test/money/**/*.test.ts',
      'test/contract/**/*.test.ts',
      'test/build/dependency-engines.test.ts',
      'test/build/stands-alone.test.ts',
      'test/build/lint-rules.test.ts',
      'test/config/**/*.test.ts',
      'test/client/extractors.test.ts',
      'test/client/guard-client.test.ts',
      'test/client/http.test.ts',
      'test/client/retry-policy.test.ts',
      'test/daemon/local-key.test.ts',
      'test/proxy/anthropic-adapter.test.ts',
      'test/proxy/call-check.test.ts',
      'test/proxy/call-relay.test.ts',
      'test/proxy/call-result.test.ts',
      'test/proxy/call-target.test.ts',
      'test/proxy/fake-upstream-sdk.test.ts',
      'test/proxy/fake-upstream.test.ts',
      'test/proxy/forwarder.test.ts',
      'test/proxy/json-rewrite.test.ts',
      'test/proxy/openai-adapter.test.ts',
      'test/proxy/proxy-refusal.test.ts',
      'test/proxy/request-bounds.test.ts',
      'test/proxy/sse-decoder.test.ts',
      'test/proxy/usage-tracker.test.ts',
      'test/service/passwords.test.ts',
      'test/service/workspace-queue.test.ts',
      'test/service/run-limits.test.ts',
      'test/store/group-commit.test.ts',
      'test/store/time-ordered-id.test.ts',
      'test/unit/periods.test.ts',
    ],
    // No setup file: the full suite's deletes Redis keys after each file.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
  },
});
