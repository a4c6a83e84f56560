/**
 * The web dashboard in a real Chromium against the real daemon (built dist/, real Postgres and
 * Redis): signing in with a one-time link, live runs, the kill switch, blocking and budgets from
 * the pages, user data rendered as text, accessibility and the keyboard. Screenshots of every page
 * go to test-artifacts/dashboard/ (git-ignored).
 *
 * One browser page walks the journey in order, as an operator would: each test leaves the
 * session signed in for the next.
 */
import { createHmac } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { caller, type Caller } from '../support/harness.js';
import { runCli } from '../support/daemon.js';
import { axeViolations, controlsTabCannotReach, launchChromium, screenshot } from '../support/browser.js';

let daemon: DaemonProcess;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let api: Caller;
const dialogs: string[] = [];
const pageErrors: string[] = [];
const cspViolations: string[] = [];
/** A webhook receiver on loopback: what it was sent. */
let receiver: Server;
let receiverUrl: string;
const received: { headers: Record<string, string | string[] | undefined>; body: string }[] = [];

const OWNER = { email: 'owner@example.com', password: 'correct horse battery' };
const XSS_IMG = '<img src=x onerror=alert(1)>';
const XSS_SCRIPT = '<script>alert(2)</script>';

async function signInLink(): Promise<string> {
  const result = await runCli(['dashboard', '--json', '--url', daemon.url, '--api-key', daemon.apiKey]);
  expect(result.stderr).toBe('');
  expect(result.code).toBe(0);
  const { url } = JSON.parse(result.stdout) as { url: string };
  return url;
}

async function startRun(userId: string, metadata?: object) {
  const res = await api.request('POST', '/v1/runs', { user_id: userId, ...(metadata ? { metadata } : {}) });
  expect(res.status).toBe(201);
  return res.body as { id: string; status: string; decision: { outcome: string; reason: string | null } };
}

async function step(runId: string, sequence: number, extra: object = {}) {
  const res = await api.request('POST', `/v1/runs/${runId}/steps`, {
    type: 'MODEL_CALL',
    sequence,
    model: 'gpt-4o-mini',
    ...extra,
  });
  expect(res.status).toBe(201);
  return res.body as { id: string; status: string; decision: { outcome: string; reason: string | null } };
}

async function goTo(path: string, heading: string) {
  await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: heading, exact: true }).click();
  await page.waitForURL((url) => url.pathname === path);
  await page.getByRole('heading', { level: 1, name: heading }).waitFor();
}

beforeAll(async () => {
  // A cheap scrypt: the daemon's default is tuned for production, not for two shared cores.
  // Webhooks to a receiver on loopback: allowed here only (the default refuses private addresses).
  // The daemon and the browser start at once (neither needs the other yet), each kept as it
  // starts, so that afterAll closes the one that did when the other failed.
  await Promise.all([
    startDaemonProcess({
      env: { RUNGUARD_SCRYPT_COST: '1024', RUNGUARD_WEBHOOK_ALLOW_PRIVATE: 'true' },
    }).then((started) => (daemon = started)),
    launchChromium().then((started) => (browser = started)),
  ]);
  receiver = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      received.push({ headers: req.headers, body });
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks/runguard`;
  api = caller(daemon.url, daemon.apiKey);
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    void dialog.dismiss();
  });
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
  });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await daemon?.close();
  await new Promise((resolve) => (receiver ? receiver.close(resolve) : resolve(undefined)));
});

// A browser on a shared machine: generous, so a slow hour fails nothing that works.
describe('the web dashboard', { timeout: 120_000 }, () => {
  it('when the daemon starts, then its output says how to open the dashboard, and / serves it under a strict CSP', async () => {
    expect(daemon.output()).toContain(`runguard: dashboard at ${daemon.url}/`);
    expect(daemon.output()).toContain('(sign in with `npx runguard dashboard`: it prints a one-time link)');
    // The start that created the workspace also prints a first link; it works once.
    const first = new RegExp(`runguard: open ${daemon.url}/sign-in#token=([\\w-]{43}) to sign in`).exec(
      daemon.output(),
    );
    expect(first).not.toBeNull();
    const redeem = () =>
      caller(daemon.url, null).request('POST', '/v1/auth/sign-in-links/redeem', { token: first![1] });
    expect((await redeem()).status).toBe(200);
    expect((await redeem()).status).toBe(401);
    const res = await fetch(`${daemon.url}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/html');
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).not.toContain('unsafe-eval');
    const html = await res.text();
    // No inline script or style in the page itself.
    expect(html).not.toMatch(/<script(?![^>]*\ssrc=)[^>]*>/);
    expect(html).not.toMatch(/<style|\sstyle=/);
    // The assets are the build's files, cached for good; nothing else on disk is reachable.
    const script = /src="(\/assets\/app-[\w-]+\.js)"/.exec(html)![1]!;
    const asset = await fetch(`${daemon.url}${script}`);
    expect(asset.status).toBe(200);
    expect(asset.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    for (const path of [
      '/assets/..%2F..%2Fpackage.json',
      '/assets/../package.json',
      '/assets/%2e%2e/api-key',
      '/index.html/../../bin/runguard',
    ]) {
      const res = await fetch(`${daemon.url}${path}`);
      expect(res.status, path).toBe(404);
      expect(await res.text(), path).not.toContain('runguard"');
    }
    // The API's 404s are untouched.
    expect((await fetch(`${daemon.url}/v1/nope`)).status).toBe(404);
  });

  it('when signed in with the one-time link, then the owner is offered; with a password set, sign-out and sign-in work', async () => {
    const link = await signInLink();
    expect(link).toMatch(new RegExp(`^${daemon.url}/sign-in#token=[\\w-]{43}$`));
    await page.goto(link);
    await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
    // The token left the address bar.
    expect(new URL(page.url()).hash).toBe('');
    await page.getByRole('heading', { name: 'Set an owner email and password' }).waitFor();
    await page.locator('.chart canvas').waitFor();
    await screenshot(page, 'owner-offered');
    expect(await axeViolations(page)).toEqual([]);

    // The link is used up: a second browser cannot use it.
    const other = await browser.newContext();
    const otherPage = await other.newPage();
    await otherPage.goto(link);
    await otherPage.getByText('This sign-in link is unknown, used or expired').waitFor();
    await other.close();

    await page.getByLabel('Owner email', { exact: true }).fill(OWNER.email);
    await page.getByLabel('Password (8 or more characters)').fill(OWNER.password);
    await page.getByRole('button', { name: 'Set owner' }).click();
    await page.getByText(`${OWNER.email} · default`).waitFor();
    await expect(page.getByRole('heading', { name: 'Set an owner email and password' }).count()).resolves.toBe(0);

    // The session survives a reload.
    await page.reload();
    await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();

    // Sign-out ends the token on the server, not only in this tab.
    const token = await page.evaluate(() => sessionStorage.getItem('runguard.session'));
    expect(token).toBeTruthy();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { level: 1, name: 'Sign in to runguard' }).waitFor();
    expect(await page.evaluate(() => sessionStorage.getItem('runguard.session'))).toBeNull();
    expect((await caller(daemon.url, token).request('GET', '/v1/auth/me')).status).toBe(401);
    await screenshot(page, 'sign-in');
    expect(await axeViolations(page)).toEqual([]);

    await page.getByLabel('Email').fill(OWNER.email);
    await page.getByLabel('Password').fill('wrong password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('Invalid email or password.').waitFor();
    await page.getByLabel('Password').fill(OWNER.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
    await page.getByText(`${OWNER.email} · default`).waitFor();
  });

  it('when a run is created through the API, then it appears in the list without a reload, and its detail shows steps and decisions as text', async () => {
    await goTo('/runs', 'Runs');
    const run = await startRun('alice', { note: XSS_IMG, tag: XSS_SCRIPT });
    await page.locator(`tr[data-run-id="${run.id}"]`).waitFor();
    const first = await step(run.id, 1, { input_data: { prompt: XSS_IMG } });
    expect(first.status).toBe('ALLOWED');
    expect(
      (
        await api.request('PATCH', `/v1/runs/${run.id}/steps/${first.id}`, {
          status: 'COMPLETED',
          duration_ms: 1234,
          prompt_tokens: 100,
          completion_tokens: 20,
          output_data: { answer: XSS_SCRIPT },
        })
      ).status,
    ).toBe(200);
    await step(run.id, 2, { type: 'TOOL_CALL', model: null, tool_name: 'search' });

    await page.locator(`tr[data-run-id="${run.id}"] a`).click();
    await page.getByRole('heading', { level: 1, name: /^Run / }).waitFor();
    const timeline = page.locator('ol.timeline');
    await timeline.locator('li.step').nth(1).waitFor();
    await expect(timeline.locator('li.step').count()).resolves.toBe(2);
    const firstStep = timeline.locator('li.step').first();
    await expect(firstStep.textContent()).resolves.toContain('MODEL_CALL');
    await expect(firstStep.textContent()).resolves.toContain('gpt-4o-mini');
    await expect(firstStep.textContent()).resolves.toContain('COMPLETED');
    await expect(firstStep.textContent()).resolves.toContain('1.23 s');
    await expect(firstStep.textContent()).resolves.toContain('100 in / 20 out');
    // Each decision with its evaluated rules, in order.
    const rules = await firstStep.locator('ol.rules li code').allTextContents();
    expect(rules).toEqual(['kill_switch', 'user_blocked', 'workspace_daily_budget', 'user_daily_budget']);
    await expect(timeline.locator('li.step').nth(1).textContent()).resolves.toContain('search');

    // The metadata and the step data are text: no element made of them, no script run.
    await firstStep.getByText('Input and output data').click();
    await expect(page.locator('figure.json pre').allTextContents()).resolves.toEqual(
      expect.arrayContaining([expect.stringContaining(XSS_IMG), expect.stringContaining(XSS_SCRIPT)]),
    );
    await expect(page.locator('main img').count()).resolves.toBe(0);
    await expect(page.locator('main script').count()).resolves.toBe(0);
    expect(dialogs).toEqual([]);
    await screenshot(page, 'run-detail');
  });

  it('when the kill switch is turned on from the page (by keyboard), then the next API run is BLOCKED; turned off, ALLOWED', async () => {
    await goTo('/settings', 'Settings');
    const turnOn = page.getByRole('button', { name: 'Turn the kill switch on' });
    await turnOn.focus();
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog', { name: 'Turn the kill switch on?' });
    await dialog.waitFor();
    // The confirmation holds the focus; Tab reaches its confirm button.
    await page.keyboard.press('Tab');
    await expect(page.evaluate(() => document.activeElement?.textContent)).resolves.toBe('Turn on: deny everything');
    await page.keyboard.press('Enter');
    await page.getByText('Kill switch is ON:').waitFor();
    await screenshot(page, 'kill-switch-on');

    const blocked = await startRun('bob');
    expect(blocked.status).toBe('BLOCKED');
    expect(blocked.decision.reason).toBe('KILL_SWITCH_ACTIVE');
    // The banner is on every page.
    await goTo('/users', 'Users');
    await page.getByText('Kill switch is ON:').waitFor();
    await goTo('/settings', 'Settings');
    await page.getByRole('button', { name: 'Turn the kill switch off' }).click();
    await page
      .getByRole('dialog', { name: 'Turn the kill switch off?' })
      .getByRole('button', { name: 'Turn off' })
      .click();
    await page.getByRole('button', { name: 'Turn the kill switch on' }).waitFor();
    await page.getByText('Kill switch is ON:').waitFor({ state: 'detached' });
    const allowed = await startRun('bob');
    expect(allowed.decision.outcome).toBe('ALLOW');
    expect(allowed.status).toBe('RUNNING');
  });

  it('when runs are filtered by status, user and time, then the list holds those only, and the filter is in the address', async () => {
    await goTo('/runs', 'Runs');
    await page.getByLabel('Status').selectOption('BLOCKED');
    await page.getByLabel('User id').fill('bob');
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.waitForURL((url) => url.search.includes('status=BLOCKED') && url.search.includes('user_id=bob'));
    await expect.poll(() => page.locator('tbody tr[data-run-id]').count()).toBe(1);
    await expect(page.locator('tbody tr[data-run-id] .badge').allTextContents()).resolves.toEqual(['BLOCKED']);
    // A range that ended before any run: none.
    await page.getByLabel('Started before (UTC)').fill('2020-01-01T00:00');
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.getByText('No runs match.').waitFor();
    await page.getByRole('button', { name: 'Clear' }).click();
    await expect.poll(() => page.locator('tbody tr[data-run-id]').count()).toBeGreaterThan(2);
    await goTo('/settings', 'Settings');
  });

  it('when the plan has no kill switch, then the page shows the reason instead of a button; the plan is changed back from the page', async () => {
    await page.getByRole('combobox', { name: 'Plan' }).selectOption('basic');
    await page.getByRole('button', { name: 'Change plan' }).click();
    await page.getByText('The kill switch needs the scale plan or higher; this workspace is on basic.').waitFor();
    await page.getByText(`${OWNER.email} · default (basic)`).waitFor();
    await expect(page.getByRole('button', { name: /Turn the kill switch/ }).count()).resolves.toBe(0);
    await screenshot(page, 'settings-basic-plan');
    const forbidden = await api.request('POST', '/v1/workspace/kill-switch', { active: true });
    expect(forbidden.status).toBe(403);
    expect((forbidden.body as { detail: string }).detail).toBe(
      'The kill switch needs the scale plan or higher; this workspace is on basic.',
    );
    await page.getByRole('combobox', { name: 'Plan' }).selectOption('scale');
    await page.getByRole('button', { name: 'Change plan' }).click();
    await page.getByRole('button', { name: 'Turn the kill switch on' }).waitFor();
  });

  it('when a user is blocked from the page, then their next step is denied; unblocked, allowed', async () => {
    const run = await startRun('carol');
    await goTo('/users', 'Users');
    await page.getByLabel('Search user ids').fill('caro');
    await page.getByRole('button', { name: 'Search' }).click();
    const row = page.locator('tr[data-user-id="carol"]');
    await row.waitFor();
    await expect.poll(() => page.locator('tbody tr[data-user-id]').count()).toBe(1);
    await row.getByRole('button', { name: 'Block carol' }).click();
    await row.getByText('Blocked', { exact: true }).waitFor();
    const denied = await step(run.id, 1);
    expect(denied.status).toBe('BLOCKED');
    expect(denied.decision.reason).toBe('USER_BLOCKED');
    await row.getByRole('button', { name: 'Unblock carol' }).click();
    await row.getByText('Active', { exact: true }).waitFor();
    expect((await step(run.id, 2)).status).toBe('ALLOWED');
  });

  it('when budgets are set from the pages, then they are enforced', async () => {
    const run = await startRun('dave');
    // A user's budget of 0 from the Users page.
    await page.getByLabel('Search user ids').fill('dave');
    await page.getByRole('button', { name: 'Search' }).click();
    const row = page.locator('tr[data-user-id="dave"]');
    await row.waitFor();
    await row.getByLabel('Daily budget in USD for dave').fill('0');
    await row.getByRole('button', { name: 'Save budget' }).click();
    await row.getByText('of $0.00').waitFor();
    const userDenied = await step(run.id, 1);
    expect(userDenied.decision.reason).toBe('USER_DAILY_BUDGET_EXCEEDED');
    await row.getByLabel('Daily budget in USD for dave').fill('');
    await row.getByRole('button', { name: 'Save budget' }).click();
    await row.getByText('(default)').waitFor();
    expect((await step(run.id, 2)).status).toBe('ALLOWED');

    // The workspace's daily budget of 0 from the Settings page.
    await goTo('/settings', 'Settings');
    await page.getByLabel('Workspace daily budget (USD)').fill('0');
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.getByText('Saved.').waitFor();
    const workspaceDenied = await step(run.id, 3);
    expect(workspaceDenied.decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    await page.getByLabel('Workspace daily budget (USD)').fill('25');
    await page.getByRole('button', { name: 'Save settings' }).click();
    await expect
      .poll(
        async () =>
          ((await api.request('GET', '/v1/workspace')).body as { daily_budget_usd: number | null }).daily_budget_usd,
      )
      .toBe(25);
    expect((await step(run.id, 4)).status).toBe('ALLOWED');
  });

  it('when the catalog is imported from the Pricing page, then the prices are listed and editable', async () => {
    await goTo('/pricing', 'Pricing');
    await page.getByRole('button', { name: 'Import catalog' }).click();
    // The daemon's first start loaded the catalog into its workspace already (#34): nothing is new.
    await page
      .getByText(/Imported the catalog of [\d-]+: 0 new, 0 changed, \d+ unchanged, 0 set by hand and kept\./)
      .waitFor();
    const prices = (await api.request('GET', '/v1/model-pricing')).body as {
      model: string;
      input_cost_per_token: number;
    }[];
    expect(prices.length).toBeGreaterThan(5);
    const mini = prices.find((p) => p.model === 'gpt-4o-mini');
    expect(mini).toBeDefined();
    // Edited in USD per million tokens; stored per token.
    await page.getByLabel('Input $/1M tokens for gpt-4o-mini', { exact: true }).fill('0.2');
    await page.getByRole('button', { name: 'Save gpt-4o-mini', exact: true }).click();
    await expect
      .poll(
        async () =>
          (
            (await api.request('GET', '/v1/model-pricing')).body as { model: string; input_cost_per_token: number }[]
          ).find((p) => p.model === 'gpt-4o-mini')?.input_cost_per_token,
      )
      .toBe(0.0000002);
    // What the form does not show is kept: the cache price, and a long-context tier.
    const after = (await api.request('GET', '/v1/model-pricing')).body as any[];
    expect(after.find((p) => p.model === 'gpt-4o-mini')?.cache_read_input_cost_per_token).toBe(
      (mini as any).cache_read_input_cost_per_token,
    );
    const pro = after.find((p) => p.model === 'gemini-2.5-pro');
    expect(pro?.long_context).toMatchObject({ above_prompt_tokens: 200_000 });
    await page.getByLabel('Output $/1M tokens for gemini-2.5-pro', { exact: true }).fill('10');
    await page.getByRole('button', { name: 'Save gemini-2.5-pro', exact: true }).click();
    await expect
      .poll(
        async () =>
          ((await api.request('GET', '/v1/model-pricing')).body as any[]).find((p) => p.model === 'gemini-2.5-pro')
            ?.source,
      )
      .toBe('user');
    expect(
      ((await api.request('GET', '/v1/model-pricing')).body as any[]).find((p) => p.model === 'gemini-2.5-pro')
        ?.long_context,
    ).toEqual(pro.long_context);
  });

  it('when unpriced models are set to deny from the Settings page, then a call to an unpriced model is denied; back to allow, allowed', async () => {
    const run = await startRun('frank');
    await goTo('/settings', 'Settings');
    const choice = page.getByLabel('Calls to unpriced models');
    await expect(choice.inputValue()).resolves.toBe('allow');
    await choice.selectOption('deny');
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.getByText('Saved.').waitFor();
    expect(((await api.request('GET', '/v1/workspace')).body as { unpriced_models: string }).unpriced_models).toBe(
      'deny',
    );
    const denied = await step(run.id, 1, { model: 'no-such-model-anywhere' });
    expect(denied.decision.reason).toBe('MODEL_NOT_PRICED');
    // The page shows what the API holds after a reload too.
    await page.reload();
    await page.getByRole('heading', { level: 1, name: 'Settings' }).waitFor();
    await expect.poll(() => page.getByLabel('Calls to unpriced models').inputValue()).toBe('deny');
    await page.getByLabel('Calls to unpriced models').selectOption('allow');
    await page.getByRole('button', { name: 'Save settings' }).click();
    await expect
      .poll(
        async () => ((await api.request('GET', '/v1/workspace')).body as { unpriced_models: string }).unpriced_models,
      )
      .toBe('allow');
    expect((await step(run.id, 2, { model: 'no-such-model-anywhere' })).status).toBe('ALLOWED');
  });

  it('when a webhook endpoint is added from the Alerts page, then its secret is shown once, a test ping reaches the receiver and shows as delivered, and it can be disabled, replayed and deleted', async () => {
    await goTo('/alerts', 'Alerts');
    await page.getByText('No endpoints yet: add one below.').waitFor();
    await page.getByLabel('Endpoint URL').fill(receiverUrl);
    await page.getByLabel('Description (optional)').fill(`ops ${XSS_IMG}`);
    await page.getByRole('checkbox', { name: /run\.failed/ }).check();
    await page.getByRole('button', { name: 'Add endpoint' }).click();
    const secretField = page.getByRole('textbox', { name: 'Signing secret' });
    const secret = await secretField.inputValue();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/=]{20,}$/);
    const [endpoint] = (await api.request('GET', '/v1/webhooks')).body as {
      id: string;
      url: string;
      events: string[];
      format: string;
      enabled: boolean;
    }[];
    expect(endpoint).toMatchObject({ url: receiverUrl, format: 'standard', enabled: true });
    expect(endpoint!.events).toContain('run.failed');
    expect(endpoint!.events).toContain('budget.threshold');
    const row = page.locator(`tr[data-endpoint-id="${endpoint!.id}"]`);
    await row.waitFor();
    // The description is text.
    await expect(row.textContent()).resolves.toContain(XSS_IMG);
    await expect(page.locator('main img').count()).resolves.toBe(0);
    // Nowhere but on the screen: not in the list's answers, not in the browser's storage.
    expect(JSON.stringify((await api.request('GET', '/v1/webhooks')).body)).not.toContain(secret);
    const stored = await page.evaluate(
      () => JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }),
    );
    expect(stored).not.toContain(secret);

    // A signed ping, received on loopback and shown as delivered.
    await row.getByRole('button', { name: /^Send test/ }).click();
    await row.getByText(/^Test ping delivered: HTTP 200 in \d+ ms\.$/).waitFor();
    const ping = received.find((r) => r.body.includes('webhook.test'));
    expect(ping).toBeDefined();
    const event = JSON.parse(ping!.body) as { id: string; type: string; data: { endpoint_id: string } };
    expect(event).toMatchObject({ type: 'webhook.test', data: { endpoint_id: endpoint!.id } });
    // Signed with the secret the page showed (Standard Webhooks).
    const signed = `${String(ping!.headers['webhook-id'])}.${String(ping!.headers['webhook-timestamp'])}.${ping!.body}`;
    const expected = createHmac('sha256', Buffer.from(secret.replace(/^whsec_/, ''), 'base64'))
      .update(signed)
      .digest('base64');
    expect(String(ping!.headers['webhook-signature']).split(' ')).toContain(`v1,${expected}`);

    // The delivery log (the endpoint just added is selected), with its status, attempts and answer.
    const deliveries = page.getByRole('region', { name: /^Recent deliveries to / });
    // Other events may arrive too (thresholds and denials from earlier in the journey): the ping's row.
    const tests = deliveries.locator('tbody tr[data-delivery-id]').filter({ hasText: 'webhook.test' });
    const delivery = tests.first();
    await delivery.waitFor();
    await expect(delivery.textContent()).resolves.toContain('webhook.test');
    await expect(delivery.locator('.badge').textContent()).resolves.toBe('delivered');
    await expect(delivery.locator('td.num').textContent()).resolves.toBe('1');
    await expect(delivery.textContent()).resolves.toContain('HTTP 200');
    await page.getByRole('button', { name: 'Done, I saved it' }).click();
    await expect(secretField.count()).resolves.toBe(0);
    await screenshot(page, 'alerts-endpoint');
    expect(await axeViolations(page), 'alerts with an endpoint').toEqual([]);
    expect(await controlsTabCannotReach(page), 'alerts with an endpoint').toEqual([]);

    // Replay: the same event again, as a new delivery.
    await delivery.getByRole('button', { name: /^Replay/ }).click();
    await deliveries.getByText(/queued again, as a new delivery\.$/).waitFor();
    await expect
      .poll(() => received.filter((r) => (JSON.parse(r.body) as { id: string }).id === event.id).length, {
        timeout: 30_000,
      })
      .toBe(2);
    await expect.poll(() => tests.count(), { timeout: 30_000 }).toBe(2);
    await expect
      .poll(() => tests.locator('.badge').allTextContents(), { timeout: 30_000 })
      .toEqual(['delivered', 'delivered']);

    // Disabled and enabled again from the page.
    await row.getByRole('button', { name: /^Disable/ }).click();
    await row.getByText('Disabled', { exact: true }).waitFor();
    expect(((await api.request('GET', `/v1/webhooks/${endpoint!.id}`)).body as { enabled: boolean }).enabled).toBe(
      false,
    );
    await row.getByRole('button', { name: /^Enable/ }).click();
    await row.getByText('Enabled', { exact: true }).waitFor();

    // Deleted, after a confirmation (Cancel first keeps it).
    await row.getByRole('button', { name: /^Delete/ }).click();
    const confirm = page.getByRole('dialog', { name: 'Delete this endpoint?' });
    await confirm.getByRole('button', { name: 'Cancel' }).click();
    await row.waitFor();
    await row.getByRole('button', { name: /^Delete/ }).click();
    await confirm.getByRole('button', { name: 'Delete endpoint' }).click();
    await page.getByText('No endpoints yet: add one below.').waitFor();
    expect((await api.request('GET', '/v1/webhooks')).body).toEqual([]);
    expect(dialogs).toEqual([]);
  });

  it('when every page is visited, then axe finds no serious or critical violation, Tab reaches every control, and a screenshot is kept', async () => {
    // Something to show: a priced call, a denial, an unpriced call.
    const run = await startRun('erin', { purpose: 'screenshots' });
    const priced = await step(run.id, 1);
    await api.request('PATCH', `/v1/runs/${run.id}/steps/${priced.id}`, {
      status: 'COMPLETED',
      prompt_tokens: 12000,
      completion_tokens: 800,
      duration_ms: 900,
    });
    const unpriced = await step(run.id, 2, { model: 'my-local-llama' });
    await api.request('PATCH', `/v1/runs/${run.id}/steps/${unpriced.id}`, {
      status: 'COMPLETED',
      prompt_tokens: 500,
      completion_tokens: 50,
      duration_ms: 300,
    });

    const pages: [string, string, string][] = [
      ['/', 'Overview', 'overview'],
      ['/runs', 'Runs', 'runs'],
      ['/users', 'Users', 'users'],
      ['/settings', 'Settings', 'settings'],
      ['/pricing', 'Pricing', 'pricing'],
      ['/alerts', 'Alerts', 'alerts'],
      ['/api-keys', 'API keys', 'api-keys'],
    ];
    for (const [path, heading, name] of pages) {
      await goTo(path, heading);
      if (name === 'overview') await page.locator('.chart canvas').waitFor();
      if (name === 'runs' || name === 'users') await page.locator('tbody tr').first().waitFor();
      if (name === 'pricing') await page.locator('ul.prices li').first().waitFor();
      if (name === 'api-keys' || name === 'alerts') await page.locator('tbody tr').first().waitFor();
      await screenshot(page, name);
      expect(await axeViolations(page), name).toEqual([]);
      expect(await controlsTabCannotReach(page), name).toEqual([]);
    }
    await page.goto(`${daemon.url}/runs/${run.id}`);
    await page.locator('ol.timeline li.step').nth(1).waitFor();
    expect(await axeViolations(page), 'run detail').toEqual([]);
    expect(await controlsTabCannotReach(page), 'run detail').toEqual([]);
    await goTo('/', 'Overview');
    await page.getByText('Unpriced model calls today:').waitFor();
    await expect(page.locator('.banner-warn').textContent()).resolves.toContain('my-local-llama');
  });

  it('when each page of the router is loaded by its own URL or reloaded, then it shows that page, not the API 404', async () => {
    // The router's paths as the dashboard declares them: a page added there is checked here too.
    const router = await readFile(new URL('../../web/src/main.tsx', import.meta.url), 'utf8');
    const paths = [...router.matchAll(/<Route path="([^"]+)"/g)].map((m) => m[1]!);
    expect(paths).toContain('/alerts');
    const runId = ((await api.request('GET', '/v1/runs?per_page=1')).body as { items: { id: string }[] }).items[0]!.id;
    for (const path of paths) {
      const url = `${daemon.url}${path.replace(':id', runId)}`;
      const direct = await page.goto(url);
      expect(direct?.status(), path).toBe(200);
      expect(direct?.headers()['content-type'], path).toContain('text/html');
      await page.locator('main h1').first().waitFor();
      await expect(page.locator('main h1').first().textContent(), path).resolves.not.toBe('Not found');
      const reloaded = await page.reload();
      expect(reloaded?.status(), path).toBe(200);
      await page.locator('main h1').first().waitFor();
      await screenshot(page, `direct${path.replace(/[/:]+/g, '-').replace(/-$/, '') || '-overview'}`);
    }
  });

  it('when the API key is regenerated from the page, then the new key is shown once with a copy button and the old key stops working', async () => {
    await goTo('/api-keys', 'API keys');
    await page.getByRole('button', { name: 'Regenerate key' }).click();
    await page
      .getByRole('dialog', { name: 'Regenerate the API key?' })
      .getByRole('button', { name: 'Regenerate' })
      .click();
    const shown = await page.getByRole('textbox', { name: 'New API key' }).inputValue();
    expect(shown).toMatch(/^lg_[a-z0-9]{12}_[\w-]{32,}$/);
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: daemon.url });
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByText('Copied.').waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(shown);
    await screenshot(page, 'api-key-shown');
    expect((await api.request('GET', '/v1/workspace')).status).toBe(401);
    expect((await caller(daemon.url, shown).request('GET', '/v1/workspace')).status).toBe(200);
    await page.getByRole('button', { name: 'Done, I saved it' }).click();
    await expect(page.getByRole('textbox', { name: 'New API key' }).count()).resolves.toBe(0);
    // Nowhere in the browser's storage.
    const stored = await page.evaluate(
      () => JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }),
    );
    expect(stored).not.toContain(shown);
    api = caller(daemon.url, shown);
  });

  it('when the password is changed from the page, then the session ends and the new password signs in', async () => {
    await goTo('/settings', 'Settings');
    const token = await page.evaluate(() => sessionStorage.getItem('runguard.session'));
    await page.getByLabel('Current password').fill(OWNER.password);
    await page.getByLabel('New password').fill('a brand new password');
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByRole('heading', { level: 1, name: 'Sign in to runguard' }).waitFor();
    expect((await caller(daemon.url, token).request('GET', '/v1/auth/me')).status).toBe(401);
    await page.getByLabel('Email').fill(OWNER.email);
    await page.getByLabel('Password').fill('a brand new password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
  });

  it('when the journey is over, then no dialog opened, no script failed and the CSP refused nothing', () => {
    expect(dialogs).toEqual([]);
    expect(pageErrors).toEqual([]);
    expect(cspViolations).toEqual([]);
  });
});
