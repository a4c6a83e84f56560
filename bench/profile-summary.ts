/**
 * Top self-time functions of a V8 .cpuprofile (node --cpu-prof), grouped by function, file and
 * line, with the share of all samples; and the same grouped by package or source folder.
 *
 *   npx tsx bench/profile-summary.ts bench/profiles/<file>.cpuprofile [top=25] [from=0]
 *
 * `from`: seconds of the profile to leave out at its start (a daemon's start: loading modules,
 * compiling route schemas), so the shares are those of the load alone.
 */
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg, fromArg] = process.argv.slice(2);
if (!file) throw new Error('usage: profile-summary.ts <file.cpuprofile> [top]');
const top = Number(topArg ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;

// Self time per node from the sample deltas (more exact than hitCount × interval).
const selfUs = new Map<number, number>();
const fromUs = Number(fromArg ?? 0) * 1e6;
let elapsedUs = 0;
profile.samples.forEach((id, i) => {
  elapsedUs += profile.timeDeltas[i] ?? 0;
  if (elapsedUs >= fromUs) selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
});
const total = [...selfUs.values()].reduce((a, b) => a + b, 0);

const where = (url: string): string => {
  if (!url) return '(native)';
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1]!;
  const src = /\/(dist|src)\/(.+)$/.exec(url);
  if (src) return `runguard:${src[2]}`;
  if (url.startsWith('node:')) return url;
  return url.replace(/^file:\/\//, '');
};

const byFunction = new Map<string, number>();
const byPlace = new Map<string, number>();
for (const node of profile.nodes) {
  const us = selfUs.get(node.id) ?? 0;
  if (!us) continue;
  const { functionName, url, lineNumber } = node.callFrame;
  const place = where(url);
  const key = `${functionName || '(anonymous)'}  ${place}${url ? `:${lineNumber + 1}` : ''}`;
  byFunction.set(key, (byFunction.get(key) ?? 0) + us);
  const group = place.startsWith('runguard:')
    ? `runguard:${place.slice(9).split('/').slice(0, -1).join('/') || '.'}`
    : place;
  byPlace.set(group, (byPlace.get(group) ?? 0) + us);
}

const print = (title: string, map: Map<string, number>, n: number) => {
  process.stdout.write(`\n${title}\n`);
  for (const [key, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, n)) {
    process.stdout.write(
      `${((100 * us) / total).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(0).padStart(7)} ms  ${key}\n`,
    );
  }
};
process.stdout.write(`${file}: ${(total / 1e6).toFixed(1)} s sampled\n`);
print(`Top ${top} functions by self time`, byFunction, top);
print('Self time by package / source folder', byPlace, 15);
