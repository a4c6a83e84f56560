/**
 * What a credential or a request may not make the daemon do (issue #38): accept a JWT that never
 * expires, hand out proxy-token URLs to the host a client wrote in its Host header, or create
 * accounts for whoever reaches a port open to the network.
 */
import { request as httpRequest } from 'node:http';
import { decodeJwt, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { registrationPolicy } from '../../src/daemon/exposure.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, startTestApi, TEST_AUTH, type TestApi } from '../support/harness.js';

let upstream: FakeUpstream;
let api: TestApi;
const apps: TestApi[] = [];

beforeAll(async () => {
  upstream = await startFakeUpstream();
  api = await startTestApi('postgres+sql', { proxy: { upstream: upstream.url } });
  apps.push(api);
});
afterAll(async () => {
  for (const app of apps) await app.close();
  await upstream?.close();
});

let seq = 0;
async function register(target: TestApi = api) {
  const res = await caller(target.url, null).request('POST', '/v1/auth/register', {
    email: `exposure${++seq}-${Date.now()}@example.com`,
    password: 'exposure password 1',
  });
  return res;
}

describe('dashboard tokens', () => {
  it('when a token signed with the real secret lacks exp or iat, then it is refused with 401', async () => {
    const registered = await register();
    expect(registered.status).toBe(201);
    const real = registered.body.access_token as string;
    const claims = decodeJwt(real);
    const key = new TextEncoder().encode(TEST_AUTH.jwtSecret);
    const sign = (withExp: boolean, withIat: boolean) => {
      let jwt = new SignJWT({ ws: claims.ws, tv: claims.tv })
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
        .setSubject(claims.sub!);
      if (withIat) jwt = jwt.setIssuedAt();
      if (withExp) jwt = jwt.setExpirationTime('1h');
      return jwt.sign(key);
    };
    const me = async (token: string) => (await caller(api.url, token).request('GET', '/v1/auth/me')).status;
    expect(await me(real)).toBe(200);
    expect(await me(await sign(true, true))).toBe(200); // the forging itself is right
    expect(await me(await sign(false, true))).toBe(401);
    expect(await me(await sign(true, false))).toBe(401);
    expect(await me(await sign(false, false))).toBe(401);
  });
});

describe('proxy-token URLs', () => {
  /** Mints a proxy token with a Host header of the caller's choosing (fetch would not send one). */
  async function mintWithHost(target: TestApi, host: string): Promise<Record<string, string>> {
    const run = await target.request('POST', '/v1/runs', { user_id: 'agent' });
    const { port } = new URL(target.url);
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port: Number(port),
          method: 'POST',
          path: `/v1/runs/${run.body.id}/proxy-token`,
          headers: { host, authorization: `Bearer ${target.apiKey}` },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () =>
            res.statusCode === 201 ? resolve(JSON.parse(text).urls) : reject(new Error(`${res.statusCode}: ${text}`)),
          );
        },
      );
      req.on('error', reject);
      req.end();
    });
  }

  it('when the Host header names another server, then the URLs still name the address the daemon listens on', async () => {
    // A name the daemon does not serve is refused outright (421, test/security/host-origin.test.ts);
    // one it serves, on another port, still does not make the URLs.
    await expect(mintWithHost(api, 'evil.example:666')).rejects.toThrow(/^421/);
    const urls = await mintWithHost(api, 'localhost:666');
    expect(Object.keys(urls).length).toBeGreaterThan(0);
    for (const url of Object.values(urls)) {
      expect(url.startsWith(`${api.url}/proxy/t/rgp_`)).toBe(true);
      expect(url).not.toContain('localhost:666');
    }
  });

  it('when publicUrl is configured, then the URLs are built from it, whatever the Host header says', async () => {
    const behindProxy = await startTestApi('postgres+sql', {
      proxy: { upstream: upstream.url },
      publicUrl: 'https://guard.example.com/runguard',
    });
    apps.push(behindProxy);
    const urls = await mintWithHost(behindProxy, '127.0.0.2:666');
    for (const url of Object.values(urls))
      expect(url.startsWith('https://guard.example.com/runguard/proxy/t/rgp_')).toBe(true);
  });
});

describe('registration', () => {
  it('when registration is closed, then register answers 403 before reading the body, and creates nothing', async () => {
    const closed = await startTestApi('postgres+sql', { auth: { registration: 'closed' } });
    apps.push(closed);
    const before = await closed.stores.db.query<{ n: number }>('SELECT count(*)::int AS n FROM accounts');
    const refused = await register(closed);
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ code: 'FORBIDDEN', detail: expect.stringContaining('registration') });
    // Refused from the request line: even a body that would not validate gets the 403.
    expect((await caller(closed.url, null).request('POST', '/v1/auth/register', { nonsense: true })).status).toBe(403);
    const after = await closed.stores.db.query<{ n: number }>('SELECT count(*)::int AS n FROM accounts');
    expect(after.rows[0]!.n).toBe(before.rows[0]!.n);
  });

  it('when the configuration does not say, then registration is open on a loopback-only daemon and closed on any other address', () => {
    expect(registrationPolicy({ registration: null, host: '127.0.0.1' })).toBe('open');
    expect(registrationPolicy({ registration: null, host: '::1' })).toBe('open');
    expect(registrationPolicy({ registration: null, host: 'localhost' })).toBe('open');
    expect(registrationPolicy({ registration: null, host: '0.0.0.0' })).toBe('closed');
    expect(registrationPolicy({ registration: null, host: '::' })).toBe('closed');
    expect(registrationPolicy({ registration: null, host: '10.1.2.3' })).toBe('closed');
    expect(registrationPolicy({ registration: 'open', host: '0.0.0.0' })).toBe('open');
    expect(registrationPolicy({ registration: 'closed', host: '127.0.0.1' })).toBe('closed');
    // The daemon's defaults, as loaded.
    expect(loadConfig({}).registration).toBeNull();
    expect(loadConfig({ RUNGUARD_REGISTRATION: 'closed' }).registration).toBe('closed');
    expect(() => loadConfig({ RUNGUARD_REGISTRATION: 'maybe' })).toThrow(
      /RUNGUARD_REGISTRATION must be one of open, closed/,
    );
    expect(() => loadConfig({ RUNGUARD_PUBLIC_URL: 'https://x.example/?a=1' })).toThrow(
      /RUNGUARD_PUBLIC_URL must be a base URL/,
    );
  });
});
