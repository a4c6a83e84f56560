/** Log lines: request ids, credentials and proxy tokens redacted, readable or JSON on demand. */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../../src/api/app.js';
import { createLogger, deferredChildLogger, loggedUrl, logPlainInfo } from '../../src/logger.js';
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
      db: stores.db,
      counters: stores.counters,
      clock: { now: () => new Date() },
      logger: createLogger('info', { format: 'json', destination: out.stream }),
      version: 't',
      bodyLimitBytes: 1 << 20,
      auth: TEST_AUTH,
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const token = 'tok_5ecretRunScopedToken0123456789';
      const res = await fetch(`${url}/proxy/t/${token}/openai/v1/chat/completions?api_key=sk-live-123`, {
        method: 'POST',
        headers: {
          authorization: 'Bearer lg_aaaaaaaaaaaa_secretsecretsecretsecretsecretsecret',
          'x-request-id': 'req-42',
        },
      });
      expect(res.headers.get('x-request-id')).toBe('req-42');
      await res.text();
    } finally {
      await app.close();
      await stores.close();
    }
    const lines = out
      .text()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const text = out.text();
    expect(text).not.toContain('5ecretRunScopedToken');
    expect(text).not.toContain('sk-live-123');
    expect(text).not.toContain('secretsecret');
    // One line for the request, at info: no proxy route here parsed the path, so nothing of it is shown.
    expect(lines.filter((l) => l.level === 30 && l.reqId === 'req-42')).toEqual([
      expect.objectContaining({ msg: 'request', method: 'POST', url: '/proxy/[redacted]', status: 404 }),
    ]);
  });

  it('when credentials are logged as fields, then they are redacted', () => {
    const out = capture();
    createLogger('info', { format: 'json', destination: out.stream }).info(
      { headers: { authorization: 'Bearer x', 'x-api-key': 'sk-1' }, api_key: 'lg_1', user: { password: 'p' } },
      'hello',
    );
    expect(JSON.parse(out.text())).toMatchObject({
      headers: { authorization: '[redacted]', 'x-api-key': '[redacted]' },
      api_key: '[redacted]',
      user: { password: '[redacted]' },
    });
  });

  it('when the format is pretty, then lines are readable text, not JSON', () => {
    const out = capture();
    createLogger('info', { format: 'pretty', destination: out.stream }).info({ url: '/x' }, 'runguard listening');
    expect(out.text()).toContain('runguard listening');
    expect(() => JSON.parse(out.text())).toThrow();
  });

  it('loggedUrl hides run tokens and credential query parameters, and nothing else', () => {
    const params = { token: 'abc', provider: 'openai', '*': 'v1/x' };
    expect(loggedUrl({ url: '/proxy/t/abc/openai/v1/x', params })).toBe('/proxy/t/[redacted]/openai/v1/x');
    expect(loggedUrl({ url: '/v1/runs?user_id=u&token=t&page=2' })).toBe('/v1/runs?user_id=u&token=[redacted]&page=2');
    expect(loggedUrl({ url: '/v1/runs/abc' })).toBe('/v1/runs/abc');
  });
});

describe('request loggers made when first used', () => {
  const lines = (text: string) =>
    text
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const strip = ({ time: _t, ...line }: Record<string, unknown>) => line;

  it('when a request logs nothing at an enabled level, then no pino child is made', () => {
    const out = capture();
    const parent = createLogger('warn', { format: 'json', destination: out.stream });
    let made = 0;
    const child = parent.child.bind(parent);
    parent.child = ((...args: Parameters<typeof child>) => (made++, child(...args))) as typeof parent.child;
    const log = deferredChildLogger(parent, { reqId: 'r1' }, {});
    log.info('not at warn');
    log.debug({ a: 1 }, 'nor this');
    expect(made).toBe(0);
    expect(out.text()).toBe('');
    log.warn('now');
    log.error('and again');
    expect(made).toBe(1);
    expect(lines(out.text()).map((l) => [l.reqId, l.msg])).toEqual([
      ['r1', 'now'],
      ['r1', 'and again'],
    ]);
  });

  it("when it logs, then the line is what an eager child writes: bindings, the route's serializers, redaction", () => {
    const line = (make: (parent: ReturnType<typeof createLogger>) => { warn: (...a: unknown[]) => void }) => {
      const out = capture();
      make(createLogger('info', { format: 'json', destination: out.stream })).warn(
        {
          req: { url: '/proxy/t/tok_secret/openai/x' },
          headers: { authorization: 'Bearer sk-live' },
          user: { password: 'p' },
        },
        'm',
      );
      return lines(out.text()).map(strip);
    };
    const options = { serializers: { req: (req: { url: string }) => ({ url: req.url.replace(/t\/[^/]+/, 't/[x]') }) } };
    const eager = line((p) => p.child({ reqId: 'r2' }, options));
    const deferred = line((p) => deferredChildLogger(p, { reqId: 'r2' }, options));
    expect(deferred).toEqual(eager);
    expect(JSON.stringify(deferred)).not.toMatch(/tok_secret|sk-live|"p"/);
  });

  it('when a request writes its one plain line, then it is what its child writes, made only at an enabled level', () => {
    const fields = { user: 'u1', run: 'r', model: 'gpt-4o-mini', status: 'COMPLETED', costUsd: 0.01, ms: 12 };
    const written = (level: string, write: (parent: ReturnType<typeof createLogger>) => void) => {
      const out = capture();
      write(createLogger(level, { format: 'json', destination: out.stream }));
      return lines(out.text()).map(strip);
    };
    const eager = written('info', (p) => p.child({ reqId: 'r4' }).info(fields, 'proxied call'));
    const plain = written('info', (p) =>
      logPlainInfo(deferredChildLogger(p, { reqId: 'r4' }, {}), 'proxied call', () => fields),
    );
    expect(plain).toEqual(eager);
    expect(Object.keys(plain[0]!)).toEqual(Object.keys(eager[0]!));
    let built = 0;
    const quiet = written('warn', (p) =>
      logPlainInfo(deferredChildLogger(p, { reqId: 'r5' }, {}), 'proxied call', () => (built++, fields)),
    );
    expect(quiet).toEqual([]);
    expect(built).toBe(0);
  });

  it('when a route sets a level of its own, then that level decides', () => {
    const out = capture();
    const log = deferredChildLogger(
      createLogger('warn', { format: 'json', destination: out.stream }),
      { reqId: 'r3' },
      { level: 'debug' },
    );
    expect(log.level).toBe('debug');
    log.debug('route debug');
    log.trace('below the route level');
    expect(lines(out.text()).map((l) => l.msg)).toEqual(['route debug']);
  });
});
