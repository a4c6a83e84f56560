/**
 * The runaway limits on the dashboard (issue #39), in a real Chromium against the real daemon
 * (built dist/): the Settings page sets the workspace's defaults and the user rate, a run started
 * after is held to them, and its detail page shows the limits that applied. Screenshots go to
 * test-artifacts/dashboard/ (git-ignored).
 */
import { describe, expect, it } from 'vitest';
import { useSignedInDashboard } from '../support/dashboard-session.js';
import { axeViolations, screenshot } from '../support/browser.js';

const dashboard = useSignedInDashboard({ viewport: { width: 1280, height: 1400 } });

describe('runaway limits on the dashboard', { timeout: 120_000 }, () => {
  it('when the limits are set on the Settings page, then the API holds them and a new run is held to them', async () => {
    const { page, api, daemon } = dashboard;
    await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Settings', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Settings' }).waitFor();
    await page.getByLabel('Steps per run').fill('2');
    await page.getByLabel('Cost per run (USD)').fill('0.75');
    await page.getByLabel('Identical calls in a row').fill('3');
    await page.getByLabel('Steps per user per minute').fill('120');
    await page.getByRole('button', { name: 'Save settings' }).click();
    await page.getByText('Saved.').waitFor();
    expect((await api.request('GET', '/v1/workspace')).body).toMatchObject({
      run_max_steps: 2,
      run_max_cost_usd: 0.75,
      run_max_identical_calls: 3,
      user_steps_per_minute: 120,
    });
    await screenshot(page, 'settings-runaway-limits');
    expect(await axeViolations(page)).toEqual([]);

    const run = (await api.request('POST', '/v1/runs', { user_id: 'dash' })).body as { id: string };
    const step = async (sequence: number) =>
      (
        await api.request('POST', `/v1/runs/${run.id}/steps`, {
          type: 'TOOL_CALL',
          tool_name: 'search',
          sequence,
          input_data: { sequence },
        })
      ).body as { status: string; decision: { reason: string | null } };
    expect((await step(1)).status).toBe('ALLOWED');
    expect((await step(2)).status).toBe('ALLOWED');
    expect((await step(3)).decision.reason).toBe('RUN_STEP_LIMIT_EXCEEDED');

    await page.goto(`${daemon.url}/runs/${run.id}`);
    await page.getByRole('heading', { level: 1, name: `Run ${run.id}` }).waitFor();
    await page.getByText('2 steps, $0.75, 3 identical calls in a row').waitFor();
    await page.getByText('RUN_STEP_LIMIT_EXCEEDED').first().waitFor();
    await screenshot(page, 'run-detail-runaway-limits');

    // Emptied, a field turns its limit off.
    await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Settings', exact: true }).click();
    await page.getByLabel('Steps per run').fill('');
    await page.getByRole('button', { name: 'Save settings' }).click();
    await expect
      .poll(
        async () =>
          ((await api.request('GET', '/v1/workspace')).body as { run_max_steps: number | null }).run_max_steps,
      )
      .toBeNull();
  });
});
