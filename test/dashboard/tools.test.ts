/**
 * The Tools page (per-tool calls, denials, failures and spend over a day) in a real Chromium
 * against the real daemon (built dist/), opened by its own URL and from the navigation.
 * Screenshots go to test-artifacts/dashboard/ (git-ignored).
 */
import { describe, expect, it } from 'vitest';
import { useSignedInDashboard } from '../support/dashboard-session.js';
import { axeViolations, screenshot } from '../support/browser.js';

const dashboard = useSignedInDashboard();

async function toolCall(runId: string, sequence: number, toolName: string, finish?: 'COMPLETED' | 'FAILED') {
  const res = await dashboard.api.request('POST', `/v1/runs/${runId}/steps`, {
    type: 'TOOL_CALL',
    sequence,
    tool_name: toolName,
    input_data: { sequence },
  });
  expect(res.status).toBe(201);
  if (finish)
    expect(
      (
        await dashboard.api.request('PATCH', `/v1/runs/${runId}/steps/${res.body.id}`, {
          status: finish,
          duration_ms: 2,
        })
      ).status,
    ).toBe(200);
}

describe('the Tools page', { timeout: 120_000 }, () => {
  it('when tools were called, denied and failed today, then the page lists each tool with its counts and spend', async () => {
    const { page, api, daemon } = dashboard;
    expect((await api.request('PUT', '/v1/tool-pricing/github.*', { per_call_usd: 0.25 })).status).toBe(200);
    expect(
      (await api.request('PATCH', '/v1/workspace', { tool_policy: { deny: ['github.delete_*'], allow: null } })).status,
    ).toBe(200);
    const run = (await api.request('POST', '/v1/runs', { user_id: 'tools' })).body.id as string;
    await toolCall(run, 1, 'github.search_code', 'COMPLETED');
    await toolCall(run, 2, 'github.search_code', 'COMPLETED');
    await toolCall(run, 3, 'github.delete_repo');
    await toolCall(run, 4, 'fs.read_file', 'FAILED');

    await page.goto(`${daemon.url}/tools`);
    await page.getByRole('heading', { level: 1, name: 'Tools' }).waitFor();
    await page.getByRole('cell', { name: 'github.search_code' }).waitFor();
    const rows = await page
      .locator('main table tbody tr')
      .evaluateAll((trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent?.trim())));
    expect(rows).toEqual([
      ['github.search_code', '2', '0', '0', '$0.50'],
      ['fs.read_file', '1', '0', '1', '$0.00'],
      ['github.delete_repo', '1', '1', '0', '$0.00'],
    ]);
    await screenshot(page, 'tools');
    expect(await axeViolations(page)).toEqual([]);

    // The navigation leads there too, and another day has no calls.
    await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Overview', exact: true }).click();
    await page.getByRole('navigation', { name: 'Pages' }).getByRole('link', { name: 'Tools', exact: true }).click();
    await page.waitForURL((url) => url.pathname === '/tools');
    await page.getByRole('cell', { name: 'github.delete_repo' }).waitFor();
    await page.getByLabel('Day').fill('2020-01-01');
    await page.getByText('No tool calls on this day.').waitFor();
  });
});
