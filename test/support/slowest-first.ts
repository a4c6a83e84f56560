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
 * Slowest first, from the per-file durations of a full run (`npm test` ends with its slowest,
 * test/support/slowest-files-report.ts). A file missing here is not skipped: it only starts in
 * vitest's order.
 */
export const SLOWEST_FILES = [
  // A quiet full run of main 2b4c195 (2026-11-29 04:13; the JSON reporter's time, which counts a
  // file's tests but not its hooks): every file of 5 s or more, slowest first.
  'test/cli/cli.test.ts',
  'test/dashboard/dashboard.test.ts',
  'test/daemon/shutdown-bounds.test.ts',
  'test/faults/result-lost.test.ts',
  'test/webhooks/delivery.test.ts',
  'test/daemon/startup.test.ts',
  'test/cli/exec-agents.test.ts',
  'test/store/directory-lock.test.ts',
  'test/budgets/reserve-mode.test.ts',
  'test/cli/exec.test.ts',
  'test/cli/settings.test.ts',
  'test/budgets/key-budgets.test.ts',
  'test/api/runs.test.ts',
  'test/limits/runaway-daemons.test.ts',
  'test/ops/daemon.test.ts',
  'test/client/daemon-process.test.ts',
  'test/cli/admin.test.ts',
  'test/client/daemon.test.ts',
  'test/budgets/runless-slots.test.ts',
  'test/store/step-batches.test.ts',
  'test/cli/shared-data-dir.test.ts',
  'test/limits/runaway-proxy.test.ts',
  'test/examples/examples.test.ts',
  'test/daemon/signals.test.ts',
  'test/proxy/proxy.test.ts',
  'test/security/unauthenticated-cost.test.ts',
  'test/budgets/tag-budgets.test.ts',
  'test/limits/runaway-api.test.ts',
  'test/budgets/unpriced-models.test.ts',
  'test/daemon/idle-memory.test.ts',
  'test/unit/contract/clients-generated.test.ts',
  'test/store/idempotency-purge.test.ts',
  'test/api/run-detail.test.ts',
  'test/faults/crash-restart.test.ts',
  'test/store/run-counts.test.ts',
  'test/faults/redis-outage.test.ts',
  'test/cli/deletion.test.ts',
  'test/cli/reconcile-schema.test.ts',
  'test/mcp/mcp-stdio.test.ts',
  'test/api/dashboard-api.test.ts',
  'test/store/run-totals.test.ts',
  'test/budgets/read-your-writes.test.ts',
  'test/faults/three-daemons.test.ts',
  'test/cli/discovery.test.ts',
  'test/store/late-indexes.test.ts',
  'test/budgets/spend-report.test.ts',
  'test/budgets/time-zone.test.ts',
  'test/store/counters.contract.test.ts',
  'test/webhooks/budget-thresholds.test.ts',
  'test/service/result-recovery.test.ts',
  'test/store/run-batches.test.ts',
  'test/api/deletion.test.ts',
  'test/budgets/budgets-resource.test.ts',
  'test/mcp/claude-mcp.test.ts',
  'test/budgets/key-roles.test.ts',
  'test/proxy/long-context-cost.test.ts',
  'test/mcp/mcp-proxy.test.ts',
  'test/service/admission.test.ts',
  'test/cli/budgets.test.ts',
  // Private servers started in the hooks (not counted above): long, whatever their tests take.
  'test/faults/postgres-outage.test.ts',
  'test/faults/postgres-outage-proxy-load.test.ts',
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
