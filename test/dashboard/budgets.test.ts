/**
 * The Budgets page (issue #51): each budget of `/v1/budgets` with its spend this period as a bar,
 * its action and its reset; added and deleted from the page. In a real Chromium against the real
 * daemon (built dist/), opened by its own URL, reloaded, and from the navigation. Screenshots go to
 * test-artifacts/dashboard/ (git-ignored).
 */
import { describe, expect, it } from 'vitest';
import { useSignedInDashboard } from '../support/dashboard-session.js';
import { axeViolations, controlsTabCannotReach, screenshot } from '../support/browser.js';

// An embedded daemon opens slowly on a loaded machine: give its start a minute.
const dashboard = useSignedInDashboard({ viewport: { width: 1280, height: 800 }, startTimeoutMs: 60_000 });

/** A completed model call of `usd` (1,000 prompt tokens a dollar) by `user`. */
async function spend(user: string, usd: number) {
  const run = (await dashboard.api.request('POST', '/v1/runs', { user_id: user })).body;
  const step = (
    await dashboard.api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'MODEL_CALL', model: 'm1', sequence: 1 })
  ).body;
  expect(step.status).toBe('ALLOWED');
  const done = await dashboard.api.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, {
    status: 'COMPLETED',
    prompt_tokens: Math.round(usd * 1000),
  });
  expect(done.status).toBe(200);
}

/** Each row's cells as text, and its bar's value. */
const rows = () =>
  dashboard.page.locator('main table tbody tr').evaluateAll((trs) =>
    trs.map((tr) => ({
      cells: [...tr.querySelectorAll('td')].slice(0, 4).map((td) => td.textContent?.trim()),
      bar: Number(tr.querySelector('progress')?.getAttribute('value') ?? NaN),
    })),
  );

describe('the Budgets page', { timeout: 180_000 }, () => {
  it('when budgets are spent, then the page shows each with its spend as a bar, its action and reset, on reload too', async () => {
    const { page, api, daemon } = dashboard;
    expect(
      (await api.request('PUT', '/v1/model-pricing/m1', { input_cost_per_token: 0.001, output_cost_per_token: 0 }))
        .status,
    ).toBe(200);
    const soft = (
      await api.request('POST', '/v1/budgets', {
        scope: 'user',
        subject: 'ana',
        period: 'week',
        limit_usd: 2,
        action: 'alert',
      })
    ).body;
    const hard = (await api.request('POST', '/v1/budgets', { scope: 'workspace', period: 'month', limit_usd: 10 }))
      .body;
    await spend('ana', 2.5);
    await spend('bo', 5.5);

    await page.goto(`${daemon.url}/budgets`);
    await page.getByRole('heading', { level: 1, name: 'Budgets' }).waitFor();
    await page.locator(`tr[data-budget-id="${hard.id}"]`).waitFor();
    expect(await rows()).toEqual([
      { cells: ['user ana', 'week', '$2.50 of $2.00 (125%)', 'alert'], bar: 1 },
      { cells: ['Workspace', 'month', '$8.00 of $10.00 (80%)', 'deny'], bar: 0.8 },
    ]);
    const resets = await page.locator(`tr[data-budget-id="${soft.id}"] td`).nth(4).textContent();
    const instant = new Date(soft.resets_at as string).toISOString();
    expect(resets).toContain(`${instant.slice(0, 10)} ${instant.slice(11, 19)} UTC`);
    expect(await page.getByRole('progressbar', { name: 'Workspace month: $8.00 of $10.00 (80%)' }).count()).toBe(1);
    await screenshot(page, 'budgets');
    await page.screenshot({ path: '/tmp/budgetui-budgets.png', fullPage: true });
    expect(await axeViolations(page)).toEqual([]);
    expect(await controlsTabCannotReach(page)).toEqual([]);

    // Reloaded, the page loads from its own address; the navigation leads there too.
    await page.reload();
    await page.locator(`tr[data-budget-id="${soft.id}"]`).waitFor();
    expect((await rows()).length).toBe(2);
    const nav = page.getByRole('navigation', { name: 'Pages' });
    await nav.getByRole('link', { name: 'Overview', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
    await nav.getByRole('link', { name: 'Budgets', exact: true }).click();
    await page.waitForURL((url) => url.pathname === '/budgets');
    await page.locator(`tr[data-budget-id="${hard.id}"]`).waitFor();
    expect(await nav.getByRole('link', { name: 'Budgets', exact: true }).getAttribute('aria-current')).toBe('page');
  });

  it('when a budget is added and one deleted from the page, then the API has them so, and bad input is said', async () => {
    const { page, api, daemon } = dashboard;
    await page.goto(`${daemon.url}/budgets`);
    await page.getByRole('heading', { level: 1, name: 'Budgets' }).waitFor();
    const form = page.getByRole('form', { name: 'Add a budget' });
    await form.getByLabel('Scope').selectOption('user');
    await form.getByLabel('Subject').fill('cy');
    await form.getByLabel('Period').selectOption('day');
    await form.getByLabel('Limit (USD)').fill('0.75');
    await form.getByLabel('When spent').selectOption('alert');
    await form.getByRole('button', { name: 'Add budget' }).click();
    await page.locator('main table tbody tr', { hasText: 'user cy' }).waitFor();
    const added = ((await api.request('GET', '/v1/budgets?scope=user&subject=cy')).body as any[])[0];
    expect(added).toMatchObject({ scope: 'user', subject: 'cy', period: 'day', limit_usd: 0.75, action: 'alert' });

    // The same scope, subject and period again: the API's 409 in words, nothing added.
    await form.getByLabel('Subject').fill('cy');
    await form.getByLabel('Limit (USD)').fill('3');
    await form.getByRole('button', { name: 'Add budget' }).click();
    await form.getByRole('alert').filter({ hasText: 'change its limit instead' }).waitFor();
    expect((await api.request('GET', '/v1/budgets?subject=cy')).body).toHaveLength(1);
    // A workspace budget has no subject field; a key budget's subject is chosen among the keys.
    await form.getByLabel('Scope').selectOption('workspace');
    expect(await form.getByLabel('Subject').count()).toBe(0);
    await form.getByLabel('Scope').selectOption('key');
    const [key] = (await api.request('GET', '/v1/api-keys')).body as { id: string; prefix: string }[];
    await form.getByLabel('Subject').selectOption(key!.id);
    expect(await form.getByLabel('Subject').locator('option:checked').textContent()).toContain(key!.prefix);

    await page.getByRole('button', { name: 'Delete the day budget of user cy' }).click();
    const dialog = page.getByRole('dialog', { name: 'Delete this budget?' });
    await dialog.waitFor();
    await screenshot(page, 'budgets-delete');
    await page.screenshot({ path: '/tmp/budgetui-budgets-delete.png' });
    await dialog.getByRole('button', { name: 'Delete budget' }).click();
    await page.locator(`tr[data-budget-id="${added.id}"]`).waitFor({ state: 'detached' });
    expect((await api.request('GET', `/v1/budgets/${added.id}`)).status).toBe(404);
    expect((await api.request('GET', '/v1/budgets')).body).toHaveLength(2);
  });
});
