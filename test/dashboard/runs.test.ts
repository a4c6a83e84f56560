/**
 * Runs in the dashboard, in a real Chromium against the real daemon (built dist/): a run's tags
 * (issue #51) as text chips, and its unpriced calls (issue #54) said, never hidden in $0.00, in the
 * run list and the run detail. Screenshots go to test-artifacts/dashboard/ (git-ignored).
 */
import { describe, expect, it } from 'vitest';
import { useSignedInDashboard } from '../support/dashboard-session.js';
import { axeViolations, screenshot } from '../support/browser.js';

const XSS = '<img src=x onerror=alert(1)>';

const dashboard = useSignedInDashboard();

describe('run tags in the dashboard', { timeout: 120_000 }, () => {
  it('when runs carry tags, then the list and the detail show them as text chips, and an untagged run says none', async () => {
    const { page, api, daemon } = dashboard;
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

describe('run costs in the dashboard', { timeout: 120_000 }, () => {
  /** The run's next model call, of 100 prompt and 25 completion tokens, ended COMPLETED. */
  const sequences = new Map<string, number>();
  async function modelCall(runId: string, model: string) {
    const sequence = (sequences.get(runId) ?? 0) + 1;
    sequences.set(runId, sequence);
    const step = await dashboard.api.request('POST', `/v1/runs/${runId}/steps`, {
      type: 'MODEL_CALL',
      model,
      sequence,
    });
    expect(step.body.status, JSON.stringify(step.body)).toBe('ALLOWED');
    const ended = await dashboard.api.request('PATCH', `/v1/runs/${runId}/steps/${step.body.id}`, {
      status: 'COMPLETED',
      prompt_tokens: 100,
      completion_tokens: 25,
    });
    expect(ended.status).toBe(200);
  }

  it('when a run has calls without a price, then the list and the detail say how many beside the cost, not $0.00 alone', async () => {
    const { page, api, daemon } = dashboard;
    const priced = 'gpt-4o-mini';
    const prices = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };
    expect((await api.request('PUT', `/v1/model-pricing/${priced}`, prices)).status).toBe(200);
    const unpriced = (await api.request('POST', '/v1/runs', { user_id: 'unpriced' })).body.id as string;
    await modelCall(unpriced, 'local-llama-3');
    await modelCall(unpriced, 'local-llama-3');
    const mixed = (await api.request('POST', '/v1/runs', { user_id: 'mixed' })).body.id as string;
    await modelCall(mixed, priced);
    await modelCall(mixed, 'local-llama-3');
    const paid = (await api.request('POST', '/v1/runs', { user_id: 'paid' })).body.id as string;
    await modelCall(paid, priced);

    await page.goto(`${daemon.url}/runs`);
    await page.getByRole('heading', { level: 1, name: 'Runs' }).waitFor();
    const costOf = async (runId: string) => {
      const row = page.locator(`tr[data-run-id="${runId}"]`);
      await row.waitFor();
      return (await row.locator('td').last().textContent())?.trim();
    };
    // 100 tokens in at $0.00001 and 25 out at $0.00004: $0.002 a priced call.
    expect(await costOf(unpriced)).toBe('$0.00 + 2 unpriced');
    expect(await costOf(mixed)).toBe('$0.002 + 1 unpriced');
    expect(await costOf(paid)).toBe('$0.002');
    await screenshot(page, 'runs-unpriced');

    await page.locator(`tr[data-run-id="${unpriced}"]`).getByRole('link').click();
    await page.getByRole('heading', { level: 1, name: /^Run / }).waitFor();
    const summary = page.locator('dl.facts.summary');
    await summary.waitFor();
    const fact = (within: typeof summary, term: string) =>
      within.locator('div', { has: page.locator('dt', { hasText: new RegExp(`^${term}$`) }) }).locator('dd');
    expect(await fact(summary, 'Cost').textContent()).toBe('$0.00 + 2 unpriced');
    const steps = page.locator('ol.timeline > li');
    await expect(steps.count()).resolves.toBe(2);
    for (const step of await steps.all())
      expect(await fact(step.locator('dl.facts'), 'Cost').textContent()).toBe('unpriced');
    await screenshot(page, 'run-detail-unpriced');
    expect(await axeViolations(page)).toEqual([]);
  });
});

describe('the header', { timeout: 120_000 }, () => {
  it('when the window is 1280 px wide, then the brand, the nine pages and the account fit on one line', async () => {
    const { page } = dashboard;
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.getByRole('textbox', { name: 'Owner email', exact: true }).fill('platform-operations@example.com');
    await page.getByLabel('Password (8 or more characters)').fill('a long enough password');
    await page.getByRole('button', { name: 'Set owner' }).click();
    await page.locator('header.top').getByText('platform-operations@example.com', { exact: false }).waitFor();
    const tops = await page
      .locator('header.top .brand, header.top nav a, header.top .who button')
      .evaluateAll((elements) => elements.map((element) => Math.round(element.getBoundingClientRect().top)));
    await screenshot(page, 'header-1280');
    expect(tops).toHaveLength(11);
    // One line: every item starts within a few pixels of the first.
    expect(Math.max(...tops) - Math.min(...tops)).toBeLessThan(12);
  });
});
