/**
 * "No cost when off" (issue #52), by construction: without the OTEL_* variables neither the
 * daemon's module graph nor loading its telemetry loads any of the OpenTelemetry SDK; with them,
 * the same process loads it (the check can see it). `@opentelemetry/api`, the SDK-free interface
 * package, is prom-client's dependency and loaded whatever the setting, as before OpenTelemetry
 * landed. What is left on the hot path when off is a boolean read per call (`telemetry.enabled`);
 * bench/lib/otel.ts measures the rest.
 */
import { describe, expect, it } from 'vitest';
import { builtModule, loadedModules, moduleScript } from '../support/loaded-modules.js';

const SCRIPT = `
await import(${JSON.stringify(builtModule('daemon/daemon.js'))});
const { loadTelemetry } = await import(${JSON.stringify(builtModule('telemetry/telemetry.js'))});
const off = await loadTelemetry({}, 'test');
process.stderr.write('MARK off enabled=' + off.enabled + '\\n');
const on = await loadTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' }, 'test');
process.stderr.write('MARK on enabled=' + on.enabled + '\\n');
await on.shutdown();
`;

describe('OpenTelemetry off', () => {
  it('when no OTEL_* variable is set, then none of the OpenTelemetry SDK is loaded; when one is, it is', async () => {
    const { code, between, errors } = await loadedModules(moduleScript(SCRIPT));
    expect(code, errors).toBe(0);
    const off = between(null, 'off enabled=false');
    const isOtel = (loaded: string) => loaded.includes('/@opentelemetry/') && !loaded.includes('/@opentelemetry/api/');
    // The daemon's whole static graph and an "off" telemetry: none of the SDK.
    expect(off.filter(isOtel)).toEqual([]);
    // The CommonJS hook works: prom-client's own files are seen, by their paths.
    expect(off.some((loaded) => loaded.startsWith('/') && loaded.includes('/prom-client/lib/'))).toBe(true);
    expect(off.some((loaded) => loaded.includes('/dist/daemon/daemon.js'))).toBe(true);
    // Asked for, it loads (the check sees the SDK when it is there).
    const on = between('off enabled=false', 'on enabled=true');
    expect(on.some((loaded) => isOtel(loaded) && loaded.includes('/sdk-trace-base/'))).toBe(true);
  });
});
