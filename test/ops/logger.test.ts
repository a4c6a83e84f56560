/** Log lines: request ids, credentials and proxy tokens redacted, readable or JSON on demand. */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../../src/api/app.js';
import { createLogger, redactUrl } from '../../src/logger.js';
import { openTestStores, TEST_AUTH } from '../support/harness.js';

function capture() {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      chunks.push(chunk.toString());
      done();
    },
  });
  return { stream, text: () => chunks.join('') };
}

describe('logs', () => {
  it('when a proxy URL with a run token is requested, then no log line carries the token or the key', async () => {
    const stores = await openTestStores('postgres+sql');
    const out = capture();
    const app = await buildApp({
      db: stores.db, counters: stores.counters, clock: { now: () => new Date() },
      logger: createLogger('info', { format: 'json', destination: out.stream }), version: 't', bodyLimitBytes: 1 << 20, auth: TEST_AUTH,
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const token = 'tok_5ecretRunScopedToken0123456789';
      const res = await fetch(`${url}/proxy/t/${token}/openai/v1/chat/completions?api_key=sk-live-123`, {
        method: 'POST',
        headers: { authorization: 'Bearer lg_aaaaaaaaaaaa_secretsecretsecretsecretsecretsecret', 'x-request-id': 'req-42' },
      });
      expect(res.headers.get('x-request-id')).toBe('req-42');
      await res.text();
    } finally {
      await app.close();
      await stores.close();
    }
    const lines = out.text().trim().split('\n').map((l) => JSON.parse(l));
    const text = out.text();
    expect(text).not.toContain('5ecretRunScopedToken');
    expect(text).not.toContain('sk-live-123');
    expect(text).not.toContain('secretsecret');
    const incoming = lines.find((l) => l.msg === 'incoming request');
    expect(incoming).toMatchObject({ reqId: 'req-42', req: { method: 'POST', url: '/proxy/t/[redacted]/openai/v1/chat/completions?api_key=[redacted]' } });
    expect(lines.find((l) => l.msg === 'request completed')).toMatchObject({ reqId: 'req-42', res: { statusCode: 404 } });
  });

  it('when credentials are logged as fields, then they are redacted', () => {
    const out = capture();
    createLogger('info', { format: 'json', destination: out.stream }).info(
      { headers: { authorization: 'Bearer x', 'x-api-key': 'sk-1' }, api_key: 'lg_1', user: { password: 'p' } },
      'hello',
    );
    expect(JSON.parse(out.text())).toMatchObject({
      headers: { authorization: '[redacted]', 'x-api-key': '[redacted]' }, api_key: '[redacted]', user: { password: '[redacted]' },
    });
  });

  it('when the format is pretty, then lines are readable text, not JSON', () => {
    const out = capture();
    createLogger('info', { format: 'pretty', destination: out.stream }).info({ url: '/x' }, 'runguard listening');
    expect(out.text()).toContain('runguard listening');
    expect(() => JSON.parse(out.text())).toThrow();
  });

  it('redactUrl hides run tokens and credential query parameters, and nothing else', () => {
    expect(redactUrl('/proxy/t/abc/openai/v1/x')).toBe('/proxy/t/[redacted]/openai/v1/x');
    expect(redactUrl('/v1/runs?user_id=u&token=t&page=2')).toBe('/v1/runs?user_id=u&token=[redacted]&page=2');
    expect(redactUrl('/v1/runs/abc')).toBe('/v1/runs/abc');
  });
});
