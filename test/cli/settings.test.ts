/**
 * The settings traps a newcomer fell into, and the CLI's look: what a command says when a setting
 * is refused, denies everything, or would create a user never seen; colour only on a terminal; one
 * money format; one footer. Against a spawned daemon on Postgres (scale plan, as a first start).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../support/daemon.js';
import { useCliDaemon } from '../support/cli-daemon.js';

const fixture = useCliDaemon();
const { cli } = fixture;
const ESC = '\u001b[';

describe('settings traps', () => {
  it("when 'none' is above the plan's ceiling, then the refusal says what each plan allows and how to change it", async () => {
    const res = await cli('limits', 'set', '--monthly-runs', 'none');
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('may not exceed 250000 on the scale plan.');
    expect(res.stderr).toContain('scale 250,000 and 100, enterprise unlimited');
    expect(res.stderr).toContain('POST /v1/billing/plan');
  });

  it('when a limit or budget of 0 is set, then it is saved with a warning that it denies everything', async () => {
    const limits = await cli('limits', 'set', '--concurrent-runs', '0');
    expect(limits.code).toBe(0);
    expect(limits.stderr).toBe(
      'runguard: warning: a concurrent run limit of 0 denies every run start (MAX_CONCURRENT_RUNS_EXCEEDED).\n',
    );
    const budget = await cli('budget', 'set', '--workspace-daily', '0');
    expect(budget.stderr).toContain('a workspace daily budget of $0.00 denies every run and call');
    const fine = await cli('limits', 'set', '--concurrent-runs', '10');
    expect(fine.stderr).toBe('');
    await cli('budget', 'set', '--workspace-daily', 'none');
  });

  it('when a user never seen is unblocked, then nothing changes and no user is created', async () => {
    const res = await cli('users', 'unblock', 'nobody-ever');
    expect(res).toMatchObject({ code: 0, stdout: 'nobody-ever is not blocked; nothing changed.\n' });
    const users = (await fixture.api.request('GET', '/v1/users?per_page=100')).body.items.map((u: any) => u.user_id);
    expect(users).not.toContain('nobody-ever');
    expect((await cli('users', 'block', 'eve')).stdout).toBe('eve is blocked.\n');
    expect((await cli('users', 'unblock', 'eve')).stdout).toBe('eve is allowed again.\n');
    expect((await fixture.api.request('POST', '/v1/runs', { user_id: 'eve' })).body.status).toBe('RUNNING');
  });

  it("when a user's budget is set to none, then the answer says which budget applies instead", async () => {
    expect((await cli('users', 'budget', 'bob', '3')).stdout).toBe('bob: daily budget $3.00 (spent today: $0.00).\n');
    expect((await cli('users', 'budget', 'bob', 'none')).stdout).toBe(
      "bob: no budget of their own; the workspace's per-user budget applies (unlimited).\n",
    );
    await cli('budget', 'set', '--user-daily', '2');
    expect((await cli('users', 'budget', 'bob', 'none')).stdout).toContain(
      "the workspace's per-user budget applies ($2.00 a day).",
    );
  });

  it('when kill-switch is given no argument, then it shows the state instead of failing', async () => {
    expect(await cli('kill-switch')).toMatchObject({ code: 0, stdout: 'Kill switch is OFF.\n' });
    await cli('kill-switch', 'on');
    expect((await cli('kill-switch')).stdout).toBe('Kill switch is ON: every run start and step is denied.\n');
    expect(JSON.parse((await cli('kill-switch', '--json')).stdout)).toEqual({ active: true, plan: 'scale' });
    await cli('kill-switch', 'off');
  });
});

describe('amounts and options as people type them', () => {
  it('when a budget is written with a dollar sign before or after, then both commands take it', async () => {
    expect((await cli('budget', 'set', '--user-daily', '10$')).code).toBe(0);
    expect((await cli('budget', 'show')).stdout).toMatch(/^per-user daily budget\s+\$10\.00$/m);
    expect((await cli('budget', 'set', '--user-daily', '$7')).code).toBe(0);
    expect((await cli('users', 'budget', 'dollar-user', '5$')).code).toBe(0);
    expect((await cli('users', 'budget', 'dollar-user', '$5')).code).toBe(0);
    await cli('budget', 'set', '--user-daily', 'none');
  });

  it('when a budget below one microdollar is set, then it is warned about as 0 is', async () => {
    const tiny = await cli('budget', 'set', '--user-daily', '0.0000001');
    expect(tiny.code).toBe(0);
    expect(tiny.stderr).toContain('below one microdollar and kept as 0');
    expect(tiny.stderr).toContain('denies every run and call');
    await cli('budget', 'set', '--user-daily', 'none');
  });

  it('when exec is given a misspelt option, then the error names it, not the missing --user', async () => {
    const misspelt = await cli('exec', '--usr', 'alice', '--', 'true');
    expect(misspelt.code).toBe(1);
    expect(misspelt.stderr).toContain("unknown option '--usr'");
    expect(misspelt.stderr).not.toContain("required option '--user");
    expect((await cli('exec', '--', 'true')).stderr).toContain("required option '--user <id>' not specified");
  });
});

describe('settings shown', () => {
  it('when limits or budget is given no argument (or show), then it prints the current values, also as JSON', async () => {
    expect((await cli('limits', 'set', '--run-max-steps', '40', '--monthly-runs', '900')).code).toBe(0);
    expect((await cli('budget', 'set', '--user-daily', '2.5', '--mode', 'reserve')).code).toBe(0);
    for (const args of [['limits'], ['limits', 'show']]) {
      const shown = await cli(...args);
      expect(shown, args.join(' ')).toMatchObject({ code: 0, stderr: '' });
      expect(shown.stdout).toMatch(/^monthly runs\s+900$/m);
      expect(shown.stdout).toMatch(/^steps per run\s+40$/m);
      expect(shown.stdout).toMatch(/^cost per run\s+off$/m);
    }
    expect(JSON.parse((await cli('limits', '--json')).stdout)).toMatchObject({
      monthly_run_limit: 900,
      run_max_steps: 40,
      run_max_cost_usd: null,
    });
    for (const args of [['budget'], ['budget', 'show']]) {
      const shown = await cli(...args);
      expect(shown, args.join(' ')).toMatchObject({ code: 0, stderr: '' });
      expect(shown.stdout).toMatch(/^per-user daily budget\s+\$2\.50$/m);
      expect(shown.stdout).toMatch(/^budget mode\s+reserve$/m);
    }
    expect(JSON.parse((await cli('budget', 'show', '--json')).stdout)).toMatchObject({
      user_daily_budget_usd: 2.5,
      budget_mode: 'reserve',
    });
    // `set --json` stays the subcommand's option.
    expect(JSON.parse((await cli('limits', 'set', '--run-max-steps', 'none', '--json')).stdout).run_max_steps).toBe(
      null,
    );
    await cli('budget', 'set', '--user-daily', 'none', '--mode', 'spend');
    await cli('limits', 'set', '--monthly-runs', '250000');
  });

  it('when status is run, then it shows every guard: budgets, budget mode, run limits and runaway limits', async () => {
    await cli('limits', 'set', '--run-max-identical-calls', '5');
    const status = await cli('status');
    expect(status).toMatchObject({ code: 0, stderr: '' });
    for (const line of [/^per-user daily budget\s+unlimited$/m, /^budget mode\s+spend$/m, /^unpriced models\s+\w+$/m]) {
      expect(status.stdout).toMatch(line);
    }
    for (const line of [
      /^steps per run\s+off$/m,
      /^cost per run\s+off$/m,
      /^identical calls in a row\s+5$/m,
      /^steps per user per minute\s+off$/m,
    ]) {
      expect(status.stdout).toMatch(line);
    }
    await cli('limits', 'set', '--run-max-identical-calls', 'none');
  });
});

describe("the CLI's look", () => {
  beforeAll(async () => {
    await fixture.api.request('PUT', '/v1/users/blocked-look', { blocked: true });
    await fixture.api.request('POST', '/v1/runs', { user_id: 'blocked-look' });
  });

  it('when output goes to a pipe, then there is no colour; FORCE_COLOR colours BLOCKED; NO_COLOR wins over it', async () => {
    const piped = await cli('runs', 'list', '--user', 'blocked-look');
    expect(piped.stdout).toContain('BLOCKED');
    expect(piped.stdout).not.toContain(ESC);
    const forced = await runCli(['runs', 'list', '--user', 'blocked-look'], { ...fixture.env, FORCE_COLOR: '1' });
    expect(forced.stdout).toContain(`${ESC}31mBLOCKED${ESC}39m`);
    // Columns are aligned as shown: the colour codes take no width.
    const strip = (text: string) => text.replace(/\u001b\[[0-9;]*m/g, '');
    expect(strip(forced.stdout)).toBe(piped.stdout);
    const noColor = await runCli(['runs', 'list', '--user', 'blocked-look'], {
      ...fixture.env,
      FORCE_COLOR: '1',
      NO_COLOR: '1',
    });
    expect(noColor.stdout).not.toContain(ESC);
    const json = await runCli(['runs', 'list', '--json'], { ...fixture.env, FORCE_COLOR: '1' });
    expect(json.stdout).not.toContain(ESC);
  });

  it('when lists end, then runs and users share one footer, and money has one format', async () => {
    const runs = await cli('runs', 'list', '--user', 'blocked-look');
    expect(runs.stdout).toMatch(/\nPage 1 of 1 \(1 run\)\.\n$/);
    expect(runs.stdout).toMatch(/BLOCKED .* \$0\.00\s+-\s+USER_BLOCKED\n/);
    expect(runs.stdout).toMatch(/^ID\s+USER\s+STATUS\s+STARTED\s+ENDED\s+STEPS\s+TOKENS\s+COST\s+MODELS\s+DENIED\n/);
    const users = await cli('users', 'list');
    expect(users.stdout).toMatch(/\nPage 1 of 1 \(\d+ users?\)\.\n$/);
    expect(users.stdout).toMatch(/blocked-look\s+yes\s+\$0\.00\s+workspace default/);
  });
});
