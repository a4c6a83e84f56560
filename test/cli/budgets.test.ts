/** `runguard budgets add|list|remove` and `keys create --role` (issue #51), against a spawned daemon. */
import { describe, expect, it } from 'vitest';
import { useCliDaemon } from '../support/cli-daemon.js';

const fixture = useCliDaemon();
const { cli } = fixture;

describe('budgets and key roles from the CLI', () => {
  it('when a budget is added, listed and removed, then the workspace has it, shows it, then not', async () => {
    const added = await cli(
      'budgets',
      'add',
      '--scope',
      'user',
      '--subject',
      'ana',
      '--period',
      'week',
      '--limit',
      '5',
      '--json',
    );
    expect(added.code).toBe(0);
    const budget = JSON.parse(added.stdout) as { id: string };
    expect((await fixture.api.request('GET', `/v1/budgets/${budget.id}`)).body).toMatchObject({
      scope: 'user',
      subject: 'ana',
      period: 'week',
      limit_usd: 5,
      action: 'deny',
    });
    const listed = await cli('budgets', 'list');
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(/user\s+ana\s+week\s+\$0\s+\$5\s+deny/);
    const removed = await cli('budgets', 'remove', budget.id);
    expect(removed.code).toBe(0);
    expect((await fixture.api.request('GET', `/v1/budgets/${budget.id}`)).status).toBe(404);
    const refused = await cli('budgets', 'add', '--scope', 'user', '--period', 'year', '--limit', '5');
    expect(refused.code).not.toBe(0);
  });

  it('when budgets are set and spent, then status shows each with its spend this period, action and reset', async () => {
    const soft = await fixture.api.request('POST', '/v1/budgets', {
      scope: 'user',
      subject: 'sol',
      period: 'month',
      limit_usd: 2,
      action: 'alert',
    });
    expect(soft.status).toBe(201);
    const hard = await fixture.api.request('POST', '/v1/budgets', { scope: 'workspace', period: 'day', limit_usd: 50 });
    expect(hard.status).toBe(201);
    expect(
      (
        await fixture.api.request('PUT', '/v1/model-pricing/m1', {
          input_cost_per_token: 0.001,
          output_cost_per_token: 0,
        })
      ).status,
    ).toBe(200);
    const run = (await fixture.api.request('POST', '/v1/runs', { user_id: 'sol' })).body;
    const step = (
      await fixture.api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'MODEL_CALL', model: 'm1', sequence: 1 })
    ).body;
    expect(
      (
        await fixture.api.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, {
          status: 'COMPLETED',
          prompt_tokens: 2500,
        })
      ).status,
    ).toBe(200);

    const status = await cli('status');
    expect(status.code).toBe(0);
    const resets = (iso: string) => iso.replace('T', ' ');
    const line = (label: string) =>
      status.stdout
        .split('\n')
        .find((text) => text.startsWith(`${label} `))
        ?.slice(label.length)
        .trim();
    expect(line('budget user sol month')).toBe(`$2.50 of $2.00 (alert); resets ${resets(soft.body.resets_at)}`);
    expect(line('budget workspace day')).toBe(`$2.50 of $50.00 (deny); resets ${resets(hard.body.resets_at)}`);
    const json = JSON.parse((await cli('status', '--json')).stdout);
    expect(json.budgets).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: soft.body.id, spend_usd: 2.5, limit_usd: 2, action: 'alert' }),
        expect.objectContaining({ id: hard.body.id, spend_usd: 2.5, limit_usd: 50, action: 'deny' }),
      ]),
    );
    for (const id of [soft.body.id, hard.body.id])
      expect((await fixture.api.request('DELETE', `/v1/budgets/${id}`)).status).toBe(204);
  });

  it('when an agent key is created, then it is shown once and listed with its role', async () => {
    const created = await cli('keys', 'create', '--name', 'ci-bot', '--role', 'agent');
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/New agent key "ci-bot" \(shown once\): lg_/);
    expect((await cli('keys', 'list')).stdout).toMatch(/ci-bot\s+agent/);
  });

  it('when a key is created with --budget, then it has those key budgets, and a bad one issues no key', async () => {
    const created = await cli(
      'keys',
      'create',
      '--name',
      'capped',
      '--role',
      'agent',
      '--budget',
      '5/day',
      '--budget',
      '$20/month',
      '--json',
    );
    expect(created.code).toBe(0);
    const key = JSON.parse(created.stdout) as { id: string; budgets: unknown[] };
    expect(key.budgets).toHaveLength(2);
    const budgets = (await fixture.api.request('GET', `/v1/budgets?scope=key&subject=${key.id}`)).body;
    expect(budgets).toMatchObject([
      { scope: 'key', subject: key.id, period: 'day', limit_usd: 5, action: 'deny' },
      { scope: 'key', subject: key.id, period: 'month', limit_usd: 20, action: 'deny' },
    ]);
    const keysBefore = (await fixture.api.request('GET', '/v1/api-keys')).body.length;
    const refused = await cli('keys', 'create', '--name', 'bad', '--budget', '5/year');
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('--budget must be USD per period');
    expect((await fixture.api.request('GET', '/v1/api-keys')).body).toHaveLength(keysBefore);
  });
});
