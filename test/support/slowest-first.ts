/**
 * The order vitest starts the files in (vitest.config.ts): the slowest first, so that the run does
 * not end on one long file while the other worker has nothing left to do. Vitest itself orders by
 * the durations of the last run on this machine, and, on a fresh clone (CI) with none, by file size,
 * which starts some of the slowest (short files of long tests) among the last. Those listed here
 * start first, in this order; the rest follow in vitest's order.
 */
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * Slowest first, from the per-file durations of `npx vitest run test/<folder> --reporter=json`
 * (issue #54 item 13). A file missing here is not skipped: it only starts in vitest's order.
 */
export const SLOWEST_FILES = [
  // A quiet full run's slowest on 2026-11-29 (before that day's cuts): 85, 83, 69, 63, 43, 39 s.
  'test/dashboard/dashboard.test.ts',
  'test/cli/cli.test.ts',
  'test/cli/settings.test.ts',
  'test/faults/result-lost.test.ts',
  'test/cli/admin.test.ts',
  'test/webhooks/delivery.test.ts',
  'test/examples/examples.test.ts',
  'test/client/daemon.test.ts',
  'test/budgets/reserve-mode.test.ts',
  'test/api/runs.test.ts',
  'test/store/step-batches.test.ts',
  'test/budgets/runless-slots.test.ts',
  'test/store/directory-lock.test.ts',
  'test/budgets/budgets-resource.test.ts',
  'test/api/run-detail.test.ts',
  'test/budgets/unpriced-models.test.ts',
  'test/budgets/spend-report.test.ts',
  'test/cli/reconcile-schema.test.ts',
  'test/cli/discovery.test.ts',
  // Daemons killed and restarted, private servers, real agent CLIs: long, whatever their size.
  'test/faults/three-daemons.test.ts',
  'test/faults/crash-restart.test.ts',
  'test/faults/redis-outage.test.ts',
  'test/faults/postgres-outage.test.ts',
  'test/faults/postgres-outage-proxy-load.test.ts',
  'test/cli/exec-agents.test.ts',
  'test/client/daemon-process.test.ts',
  'test/daemon/idle-memory.test.ts',
];

export default class SlowestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (spec: TestSpecification) => {
      const index = SLOWEST_FILES.indexOf(relative(spec.project.config.root, spec.moduleId));
      return index < 0 ? SLOWEST_FILES.length : index;
    };
    // Array.prototype.sort is stable: the unlisted keep vitest's order.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}
