/**
 * "No cost when off" (issue #52), by construction: without the OTEL_* variables neither the
 * daemon's module graph nor loading its telemetry loads any of the OpenTelemetry SDK; with them,
 * the same process loads it (the check can see it). `@opentelemetry/api`, the SDK-free interface
 * package, is prom-client's dependency and loaded whatever the setting, as before OpenTelemetry
 * landed. What is left on the hot path when off is a boolean read per call (`telemetry.enabled`);
 * bench/lib/otel.ts measures the rest.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/daemon.js';

/** Every module the child loads, one `R <url or path>` line each on stderr: ES modules... */
const HOOKS = `export async function resolve(s, c, n) { const r = await n(s, c); process.stderr.write('R ' + r.url + '\\n'); return r; }`;
const REGISTER = `import { register } from 'node:module'; register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(HOOKS)}));`;
/** ...and CommonJS ones (prom-client, the OpenTelemetry packages' CommonJS builds). */
const CJS_HOOK = `const M = require('node:module'); const resolve = M._resolveFilename;
M._resolveFilename = function (...args) { const r = resolve.apply(this, args); process.stderr.write('R ' + r + '\\n'); return r; };`;

const dist = (path: string) => pathToFileURL(join(ROOT, 'dist', path)).href;
const SCRIPT = `
await import(${JSON.stringify(dist('daemon/daemon.js'))});
const { loadTelemetry } = await import(${JSON.stringify(dist('telemetry/telemetry.js'))});
const off = await loadTelemetry({}, 'test');
process.stderr.write('MARK off enabled=' + off.enabled + '\\n');
const on = await loadTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' }, 'test');
process.stderr.write('MARK on enabled=' + on.enabled + '\\n');
await on.shutdown();
`;

function resolvedModules(): Promise<{ code: number | null; lines: string[] }> {
  const cjsHook = join(mkdtempSync(join(tmpdir(), 'rg-otel-off-')), 'cjs-hook.cjs');
  writeFileSync(cjsHook, CJS_HOOK);
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        '--require',
        cjsHook,
        '--import',
        `data:text/javascript,${encodeURIComponent(REGISTER)}`,
        '--input-type=module',
        '-e',
        SCRIPT,
      ],
      { cwd: ROOT, env: { PATH: process.env.PATH ?? '' }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, lines: stderr.split('\n') }));
  });
}

describe('OpenTelemetry off', () => {
  it('when no OTEL_* variable is set, then none of the OpenTelemetry SDK is loaded; when one is, it is', async () => {
    const { code, lines } = await resolvedModules();
    expect(code, lines.filter((line) => !line.startsWith('R ')).join('\n')).toBe(0);
    const offMark = lines.indexOf('MARK off enabled=false');
    const onMark = lines.indexOf('MARK on enabled=true');
    expect(offMark).toBeGreaterThan(0);
    expect(onMark).toBeGreaterThan(offMark);
    const isOtel = (line: string) =>
      line.startsWith('R ') && line.includes('/@opentelemetry/') && !line.includes('/@opentelemetry/api/');
    // The daemon's whole static graph and an "off" telemetry: none of the SDK.
    expect(lines.slice(0, offMark).filter(isOtel)).toEqual([]);
    // The CommonJS hook works: prom-client, and the interface package it requires, are seen.
    expect(lines.slice(0, offMark).some((line) => line.includes('/prom-client/'))).toBe(true);
    expect(lines.slice(0, offMark).some((line) => line.includes('/dist/daemon/daemon.js'))).toBe(true);
    // Asked for, it loads (the check sees the SDK when it is there).
    expect(lines.slice(offMark, onMark).some((line) => isOtel(line) && line.includes('/sdk-trace-base/'))).toBe(true);
  });
});
