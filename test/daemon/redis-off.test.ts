/**
 * A daemon without REDIS_URL loads no Redis client: ioredis and the Redis counters are imported
 * by openStores when a Redis URL is configured, not by the daemon's module graph, which every
 * daemon process (and every test that spawns one) loads at start.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/daemon.js';

/** Every module the child resolves, one `R <url>` line each on stderr. */
const HOOKS = `export async function resolve(s, c, n) { const r = await n(s, c); process.stderr.write('R ' + r.url + '\\n'); return r; }`;
const REGISTER = `import { register } from 'node:module'; register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(HOOKS)}));`;

const dist = (path: string) => pathToFileURL(join(ROOT, 'dist', path)).href;
const SCRIPT = `
await import(${JSON.stringify(dist('daemon/daemon.js'))});
process.stderr.write('MARK daemon loaded\\n');
await import(${JSON.stringify(dist('store/counters/redis-counters.js'))});
`;

function resolvedModules(): Promise<{ code: number | null; lines: string[] }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', `data:text/javascript,${encodeURIComponent(REGISTER)}`, '--input-type=module', '-e', SCRIPT],
      { cwd: ROOT, env: { PATH: process.env.PATH ?? '' }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, lines: stderr.split('\n') }));
  });
}

describe('Redis off', () => {
  it("when the daemon's modules are loaded, then ioredis is not among them; the Redis counters bring it", async () => {
    const { code, lines } = await resolvedModules();
    expect(code, lines.filter((line) => !line.startsWith('R ')).join('\n')).toBe(0);
    const mark = lines.indexOf('MARK daemon loaded');
    expect(mark).toBeGreaterThan(0);
    const isRedis = (line: string) =>
      line.startsWith('R ') && /\/node_modules\/ioredis\/|\/redis-counters\.js$/.test(line);
    expect(lines.slice(0, mark).some((line) => line.endsWith('/dist/daemon/daemon.js'))).toBe(true);
    expect(lines.slice(0, mark).filter(isRedis)).toEqual([]);
    // The check sees ioredis when it is loaded.
    expect(lines.slice(mark).filter(isRedis).length).toBeGreaterThan(0);
  });
});
