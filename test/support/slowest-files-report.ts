/**
 * After a run of many files (`npm test`, CI), the files that took longest, slowest first: where the
 * run's time goes, and the order test/support/slowest-first.ts should start them in. A file's time
 * is its import, its hooks and its tests, as vitest measured them in the worker.
 */
import { relative } from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

/** How many are listed; a run of no more files than this (a folder, a file) lists none. */
const LISTED = 25;

export default class SlowestFilesReport implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    if (testModules.length <= LISTED) return;
    const timed = testModules
      .map((module) => {
        const { collectDuration, setupDuration, duration } = module.diagnostic();
        return {
          file: relative(module.project.config.root, module.moduleId),
          seconds: (collectDuration + setupDuration + duration) / 1000,
        };
      })
      .sort((a, b) => b.seconds - a.seconds)
      .slice(0, LISTED);
    const lines = timed.map(({ file, seconds }) => `${seconds.toFixed(1).padStart(7)} s  ${file}`);
    process.stdout.write(`\n::: the ${LISTED} slowest test files (import, hooks and tests)\n${lines.join('\n')}\n`);
  }
}
