/**
 * Accounts (issue #48, item 5): the commonly breached passwords, and those that are only
 * whitespace or one character repeated, are refused wherever a password is set (register, a
 * password change, naming a sign-in link's owner) with a 422 naming the field. A taken email keeps
 * the contract's 409; each such answer is logged, and register is rate limited per client address.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { weakPasswordReason } from '../../src/admin/password-policy.js';
import { caller, startTestApi, type TestApi } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';

const COMMON = ['password', '12345678', 'iloveyou', 'sunshine', 'Password1', 'trustno1', 'qwertyuiop', 'football'];
const DEGENERATE = ['        ', '\t\t\t\t\t\t\t\t', 'aaaaaaaa', '11111111111', '😀😀😀😀😀😀😀😀'];

let api: TestApi;
const log = captureLog('info');

beforeAll(async () => {
  api = await startTestApi('postgres+sql', { logger: log.logger, rateLimitPerMinute: 1000 });
});
afterAll(async () => {
  await api?.close();
});

const anonymous = () => caller(api.url, null);
let n = 0;
const email = () => `user${++n}-${Date.now()}@example.com`;

async function accountCount(): Promise<number> {
  const { rows } = await api.stores.db.query<{ n: number }>('SELECT count(*)::int AS n FROM accounts');
  return rows[0]!.n;
}

describe('a new password', () => {
  it('when it is a commonly breached one, or only whitespace, or one character repeated, then register answers 422 naming it', async () => {
    const before = await accountCount();
    for (const password of [...COMMON, ...DEGENERATE]) {
      const res = await anonymous().request('POST', '/v1/auth/register', { email: email(), password });
      expect(res.status, JSON.stringify(password)).toBe(422);
      expect(res.body).toMatchObject({ code: 'VALIDATION_FAILED', errors: [{ path: 'body.password' }] });
    }
    expect(await accountCount()).toBe(before);
  });

  it('when it is long and uncommon, then register creates the account', async () => {
    for (const password of ['correct horse battery', 'a passphrase of my own', 'Tr0ub4dor&3-but-longer']) {
      expect((await anonymous().request('POST', '/v1/auth/register', { email: email(), password })).status).toBe(201);
    }
  });

  it('when a password change names a breached password, then 422 naming new_password, and the old one still works', async () => {
    const address = email();
    const reg = await anonymous().request('POST', '/v1/auth/register', {
      email: address,
      password: 'my first passphrase',
    });
    expect(reg.status).toBe(201);
    const me = caller(api.url, reg.body.access_token);
    for (const password of ['password1', 'baseball', '        ']) {
      const res = await me.request('POST', '/v1/auth/password', {
        current_password: 'my first passphrase',
        new_password: password,
      });
      expect(res.status, password).toBe(422);
      expect(res.body.errors).toEqual([{ path: 'body.new_password', message: expect.any(String) }]);
    }
    const login = await anonymous().request('POST', '/v1/auth/login', {
      email: address,
      password: 'my first passphrase',
    });
    expect(login.status).toBe(200);
    const changed = await me.request('POST', '/v1/auth/password', {
      current_password: 'my first passphrase',
      new_password: 'my second passphrase',
    });
    expect(changed.status).toBe(204);
  });

  it('when the list is asked directly, then case does not help and a long passphrase passes', async () => {
    expect(await weakPasswordReason('PASSWORD')).toMatch(/commonly used/);
    expect(await weakPasswordReason('Sunshine')).toMatch(/commonly used/);
    expect(await weakPasswordReason('  \u00a0\n  ')).toMatch(/whitespace/);
    expect(await weakPasswordReason('zzzzzzzzzzzz')).toMatch(/repeated/);
    expect(await weakPasswordReason('correct horse battery staple')).toBeNull();
  });
});

describe('registering a taken email', () => {
  it('when the email has an account, then 409 as the contract says, nothing created, and the attempt logged', async () => {
    const address = email();
    expect(
      (await anonymous().request('POST', '/v1/auth/register', { email: address, password: 'first owner phrase' }))
        .status,
    ).toBe(201);
    const before = await accountCount();
    const from = log.lines.length;
    const again = await anonymous().request('POST', '/v1/auth/register', {
      email: address.toUpperCase(),
      password: 'someone else entirely',
    });
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('CONFLICT');
    expect(await accountCount()).toBe(before);
    const logged = log.lines.slice(from).map((line) => JSON.parse(line));
    expect(logged).toContainEqual(
      expect.objectContaining({ level: 40, msg: 'registration refused: an account with this email exists' }),
    );
    // The log says that it happened, not which address or password.
    expect(log.lines.slice(from).join('')).not.toContain(address.split('@')[0]);
    expect(log.lines.slice(from).join('')).not.toContain('someone else entirely');
  });

  it('when one client registers again and again, then it is rate limited with 429', async () => {
    const limited = await startTestApi('postgres+sql', { rateLimitPerMinute: 3 });
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await caller(limited.url, null).request('POST', '/v1/auth/register', {
          email: `probe${i}@example.com`,
          password: 'probing passphrase',
        });
        statuses.push(res.status);
      }
      expect(statuses).toEqual([201, 201, 201, 429, 429]);
    } finally {
      await limited.close();
    }
  });
});
