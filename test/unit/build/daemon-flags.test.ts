/**
 * The daemon's V8 flags (docs/performance.md, "The V8 flags the daemon runs with") are written in
 * four places: bin/runguard's second line (`runguard`, `npx runguard`), package.json's `start`,
 * the Dockerfile's ENTRYPOINT and the bench's daemon. Its memory targets are for the daemon as
 * users start it, so each way must start Node with the same flags the bench measured.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');

function flagsBefore(words: string[], script: string): string[] {
  const at = words.indexOf(script);
  if (words[0] !== 'node' || at < 0) throw new Error(`not "node <flags> ${script}": ${words.join(' ')}`);
  return words.slice(1, at);
}

const launchers: Record<string, () => string[]> = {
  'bin/runguard (runguard, npx runguard)': () =>
    flagsBefore(/^":" \/\/; exec (.*)$/m.exec(read('bin/runguard'))![1]!.split(/\s+/), '"$0"'),
  'npm start': () =>
    flagsBefore(
      (JSON.parse(read('package.json')) as { scripts: { start: string } }).scripts.start
        .replace(/^exec /, '')
        .split(/\s+/),
      'bin/runguard',
    ),
  'the Docker image': () =>
    flagsBefore(JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(read('Dockerfile'))![1]!) as string[], 'bin/runguard'),
  'the bench': () =>
    [.../const DAEMON_NODE_FLAGS = \[([^\]]*)\]/.exec(read('bench/lib/processes.ts'))![1]!.matchAll(/'([^']+)'/g)].map(
      (m) => m[1]!,
    ),
};

describe("the daemon's V8 flags", () => {
  it('when the daemon is started any of the ways users start it, then Node gets the flags the bench measures', () => {
    const flags = Object.fromEntries(Object.entries(launchers).map(([way, flagsOf]) => [way, flagsOf()]));
    expect(flags['the bench']).toContain('--heap-growing-percent=50');
    for (const way of Object.keys(launchers))
      expect({ way, flags: flags[way] }).toEqual({ way, flags: flags['the bench'] });
  });

  it('when bin/runguard is run as a program, then its shell line execs node with those flags, itself and the arguments', () => {
    // A `node` first on PATH that prints what it was given: the shell line, not Node, is under test.
    const dir = mkdtempSync(join(tmpdir(), 'runguard-flags-'));
    try {
      writeFileSync(join(dir, 'node'), '#!/bin/sh\nprintf "%s\\n" "$@"\n');
      chmodSync(join(dir, 'node'), 0o755);
      const bin = join(ROOT, 'bin', 'runguard');
      const argv = execFileSync(bin, ['start', '--port', '1'], {
        env: { PATH: `${dir}:/usr/bin:/bin` },
        encoding: 'utf8',
      }).trimEnd();
      expect(argv.split('\n')).toEqual([...launchers['the bench']!(), bin, 'start', '--port', '1']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
