/** Brute-force limits, secrets kept out of logs, and /health naming what is down. */
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/api/app.js';
import { createLogger } from '../../src/logger.js';
import { RedisCounters } from '../../src/store/counters/redis-counters.js';
import { SqlCounters } from '../../src/store/counters/sql-counters.js';
import { postgresDb } from '../../src/store/db.js';
import { caller, startTestApi, TEST_AUTH, type TestApi } from '../support/harness.js';

const apps: TestApi[] = [];
afterAll(async () => {
  for (const app of apps) await app.close();
});

describe('hardening', () => {
  it('when login is hammered from one address, then it is rate limited with 429', async () => {
    const api = await startTestApi('postgres+sql', { rateLimitPerMinute: 3 });
    apps.push(api);
    const anonymous = caller(api.url, null);
    const statuses = [];
    for (let i = 0; i < 5; i++) {
      statuses.push(
        (await anonymous.request('POST', '/v1/auth/login', { email: 'a@example.com', password: 'whatever1' })).status,
      );
    }
    expect(statuses).toEqual([401, 401, 401, 429, 429]);
    const limited = await anonymous.request('POST', '/v1/auth/login', {
      email: 'a@example.com',
      password: 'whatever1',
    });
    expect(limited.body).toMatchObject({ code: 'RATE_LIMITED', detail: expect.any(String) });
    // Other endpoints are not limited.
    expect((await api.request('GET', '/v1/runs')).status).toBe(200);
  });

  it('when accounts register, log in and call with keys, then no password, key secret or token reaches the log', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const api = await startTestApi('postgres+sql', { logger: createLogger('trace', sink) });
    apps.push(api);
    const anonymous = caller(api.url, null);
    const password = 'super-secret-password-42';
    const reg = await anonymous.request('POST', '/v1/auth/register', { email: 'log@example.com', password });
    const login = await anonymous.request('POST', '/v1/auth/login', { email: 'log@example.com', password });
    await caller(api.url, reg.body.api_key).request('POST', '/v1/runs', { user_id: 'u' });
    await caller(api.url, login.body.access_token).request('GET', '/v1/auth/me');
    await caller(api.url, 'lg_aaaaaaaaaaaa_wrongwrongwrongwrongwrongwrongwrong').request('GET', '/v1/runs');
    const log = lines.join('');
    expect(lines.length).toBeGreaterThan(8); // requests were logged at all
    for (const secret of [
      password,
      reg.body.api_key,
      reg.body.api_key.split('_').slice(2).join('_'),
      login.body.access_token,
      reg.body.access_token,
      'wrongwrongwrongwrong',
    ]) {
      expect(log).not.toContain(secret);
    }
  });

  it('when the counter store or the database is down, then /health answers 503 naming it', async () => {
    const api = await startTestApi('postgres+sql');
    apps.push(api);
    // A Redis that is not there: nothing listens on port 1.
    const deadRedis = new Redis('redis://127.0.0.1:1', {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    deadRedis.on('error', () => {});
    const deadDb = postgresDb({ connectionString: 'postgres://postgres@127.0.0.1:1/none', connectionTimeoutMs: 500 });
    const common = {
      clock: { now: () => new Date() },
      logger: createLogger('silent'),
      version: 't',
      bodyLimitBytes: 1024,
      auth: TEST_AUTH,
    };

    const noRedis = await buildApp({
      ...common,
      db: api.stores.db,
      counters: new RedisCounters(deadRedis, api.stores.db),
    });
    const a = await noRedis.inject({ method: 'GET', url: '/health' });
    expect(a.statusCode).toBe(503);
    expect(a.json()).toMatchObject({
      status: 'unavailable',
      checks: { database: 'ok', counters: 'unavailable' },
      code: 'SERVICE_UNAVAILABLE',
    });
    expect(a.json().detail).toContain('counters');

    const noDb = await buildApp({ ...common, db: deadDb, counters: new SqlCounters(deadDb) });
    const b = await noDb.inject({ method: 'GET', url: '/health' });
    expect(b.statusCode).toBe(503);
    expect(b.json().checks.database).toBe('unavailable');
    await Promise.all([noRedis.close(), noDb.close(), deadDb.close()]);
    deadRedis.disconnect();
  });
});
