/** `runguard budget set --mode` and `--default-step-reservation` (issue #34, part 3), against a spawned daemon. */
import { describe, expect, it } from 'vitest';
import { useCliDaemon } from '../support/cli-daemon.js';

const fixture = useCliDaemon();
const { cli } = fixture;

describe('budget mode from the CLI', () => {
  it('when the mode and the default reservation are set, then the workspace has them and the CLI shows them', async () => {
    const set = await cli('budget', 'set', '--mode', 'reserve', '--default-step-reservation', '0.02');
    expect(set.code).toBe(0);
    expect(set.stdout).toMatch(/budget mode\s+reserve/);
    expect(set.stdout).toMatch(/default step reservation\s+\$0\.02/);
    expect((await fixture.api.request('GET', '/v1/workspace')).body).toMatchObject({
      budget_mode: 'reserve',
      default_step_reservation_usd: 0.02,
    });
  });

  it('when the mode is not one of spend and reserve, then the CLI refuses it', async () => {
    const refused = await cli('budget', 'set', '--mode', 'hold');
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/spend, reserve/);
  });
});
