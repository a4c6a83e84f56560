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

  it('when an agent key is created, then it is shown once and listed with its role', async () => {
    const created = await cli('keys', 'create', '--name', 'ci-bot', '--role', 'agent');
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/New agent key "ci-bot" \(shown once\): lg_/);
    expect((await cli('keys', 'list')).stdout).toMatch(/ci-bot\s+agent/);
  });
});
