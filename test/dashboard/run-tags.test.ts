/**
 * A run's tags in the dashboard (issue #51): chips in the run list and the run detail, as text,
 * in a real Chromium against the real daemon (built dist/). Screenshots go to
 * test-artifacts/dashboard/ (git-ignored).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { caller, type Caller } from '../support/harness.js';
import { runCli } from '../support/daemon.js';
import { axeViolations, launchChromium, screenshot } from '../support/browser.js';

let daemon: DaemonProcess;
let browser: Browser;
let page: Page;
let api: Caller;

const XSS = '<img src=x onerror=alert(1)>';

beforeAll(async () => {
  daemon = await startDaemonProcess({ env: { RUNGUARD_SCRYPT_COST: '1024' } });
  api = caller(daemon.url, daemon.apiKey);
  browser = await launchChromium();
  page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  const result = await runCli(['dashboard', '--json', '--url', daemon.url, '--api-key', daemon.apiKey]);
  expect(result.code).toBe(0);
  await page.goto((JSON.parse(result.stdout) as { url: string }).url);
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await daemon?.close();
});

describe('run tags in the dashboard', { timeout: 120_000 }, () => {
  it('when runs carry tags, then the list and the detail show them as text chips, and an untagged run says none', async () => {
    const dialogs: string[] = [];
    page.on('dialog', (dialog) => {
      dialogs.push(dialog.message());
      void dialog.dismiss();
    });
    const tags = { project: 'search', team: 'growth', note: XSS };
    const tagged = (await api.request('POST', '/v1/runs', { user_id: 'tagged', tags })).body.id as string;
    const plain = (await api.request('POST', '/v1/runs', { user_id: 'plain' })).body.id as string;

    await page.goto(`${daemon.url}/runs`);
    await page.getByRole('heading', { level: 1, name: 'Runs' }).waitFor();
    const row = page.locator(`tr[data-run-id="${tagged}"]`);
    await row.waitFor();
    // Sorted by key, each key=value.
    expect(await row.getByRole('list', { name: 'Tags' }).getByRole('listitem').allTextContents()).toEqual([
      `note=${XSS}`,
      'project=search',
      'team=growth',
    ]);
    expect(await page.locator(`tr[data-run-id="${plain}"]`).textContent()).toContain('none');
    await screenshot(page, 'runs-tags');

    await row.getByRole('link').click();
    await page.getByRole('heading', { level: 1, name: /^Run / }).waitFor();
    const facts = page.locator('dl.facts.summary');
    await facts.getByRole('list', { name: 'Tags' }).waitFor();
    expect(await facts.getByRole('list', { name: 'Tags' }).getByRole('listitem').allTextContents()).toEqual([
      `note=${XSS}`,
      'project=search',
      'team=growth',
    ]);
    await expect(page.locator('main img').count()).resolves.toBe(0);
    expect(dialogs).toEqual([]);
    await screenshot(page, 'run-detail-tags');
    expect(await axeViolations(page)).toEqual([]);
  });
});
