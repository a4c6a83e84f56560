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
/** A test runs several CLI processes: each takes seconds on a loaded machine (7 s at a load of 14). */
const CLI_TESTS = { timeout: 60_000 };

/**
 * Settings a test only needs in place, or back as they were, set through the API: a CLI process
 * costs a second or more on a loaded machine, and the commands under test run as users run them.
 */
async function patchWorkspace(changes: Record<string, unknown>) {
  expect((await fixture.api.request('PATCH', '/v1/workspace', changes)).status).toBe(200);
}
async function setKillSwitch(active: boolean) {
  expect((await fixture.api.request('POST', '/v1/workspace/kill-switch', { active })).status).toBe(200);
}

describe('settings traps', CLI_TESTS, () => {
  it("when 'none' is above the plan's ceiling, then the refusal says what each plan allows and how to change it", async () => {
    const res = await cli('limits', 'set', '--monthly-runs', 'none');
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('may not exceed 250000 on the scale plan.');
    expect(res.stderr).toContain('scale 250,000 and 100, enterprise unlimited');
    expect(res.stderr).toContain('POST /v1/billing/plan');
  });

  it('when a limit or budget of 0 is set, then it is saved with a warning that it denies everything', async () => {
    // Different fields of the workspace: the commands may run at once.
    const [limits, budget] = await Promise.all([
      cli('limits', 'set', '--concurrent-runs', '0'),
      cli('budget', 'set', '--workspace-daily', '0'),
    ]);
    expect(limits.code).toBe(0);
    expect(limits.stderr).toBe(
      'runguard: warning: a concurrent run limit of 0 denies every run start (MAX_CONCURRENT_RUNS_EXCEEDED).\n',
    );
    expect(budget.stderr).toContain('a workspace daily budget of $0.00 denies every run and call');
    const [fine] = await Promise.all([
      cli('limits', 'set', '--concurrent-runs', '10'),
      patchWorkspace({ daily_budget_usd: null }),
    ]);
    expect(fine.stderr).toBe('');
  });

  it('when a user never seen is unblocked, then nothing changes and no user is created', async () => {
    const [res, blocked] = await Promise.all([cli('users', 'unblock', 'nobody-ever'), cli('users', 'block', 'eve')]);
    expect(res).toMatchObject({ code: 0, stdout: 'nobody-ever is not blocked; nothing changed.\n' });
    const users = (await fixture.api.request('GET', '/v1/users?per_page=100')).body.items.map((u: any) => u.user_id);
    expect(users).not.toContain('nobody-ever');
    expect(blocked.stdout).toBe('eve is blocked.\n');
    expect((await cli('users', 'unblock', 'eve')).stdout).toBe('eve is allowed again.\n');
    expect((await fixture.api.request('POST', '/v1/runs', { user_id: 'eve' })).body.status).toBe('RUNNING');
  });

  it("when a user's budget is set to none, then the answer says which budget applies instead", async () => {
    expect((await cli('users', 'budget', 'bob', '3')).stdout).toBe('bob: daily budget $3.00 (spent today: $0.00).\n');
    expect((await cli('users', 'budget', 'bob', 'none')).stdout).toBe(
      "bob: no budget of their own; the workspace's per-user budget applies (unlimited).\n",
    );
    await patchWorkspace({ user_daily_budget_usd: 2 });
    expect((await cli('users', 'budget', 'bob', 'none')).stdout).toContain(
      "the workspace's per-user budget applies ($2.00 a day).",
    );
  });

  it('when kill-switch is given no argument, then it shows the state instead of failing', async () => {
    expect(await cli('kill-switch')).toMatchObject({ code: 0, stdout: 'Kill switch is OFF.\n' });
    await setKillSwitch(true);
    const [shown, json] = await Promise.all([cli('kill-switch'), cli('kill-switch', '--json')]);
    expect(shown.stdout).toBe('Kill switch is ON: every run start and step is denied.\n');
    expect(JSON.parse(json.stdout)).toEqual({ active: true, plan: 'scale' });
    await setKillSwitch(false);
  });
});

describe('amounts and options as people type them', CLI_TESTS, () => {
  it('when a budget is written with a dollar sign before or after, then both commands take it', async () => {
    // A user's budget is not the workspace's: both commands' checks run at once.
    const [, amountThenSign, signThenAmount] = await Promise.all([
      (async () => {
        expect((await cli('budget', 'set', '--user-daily', '10$')).code).toBe(0);
        expect((await cli('budget', 'show')).stdout).toMatch(/^per-user daily budget\s+\$10\.00$/m);
        expect((await cli('budget', 'set', '--user-daily', '$7')).code).toBe(0);
      })(),
      cli('users', 'budget', 'dollar-user', '5$'),
      cli('users', 'budget', 'dollar-user', '$5'),
    ]);
    expect(amountThenSign.code).toBe(0);
    expect(signThenAmount.code).toBe(0);
    await patchWorkspace({ user_daily_budget_usd: null });
  });

  it('when a budget below one microdollar is set, then it is warned about as 0 is', async () => {
    const tiny = await cli('budget', 'set', '--user-daily', '0.0000001');
    expect(tiny.code).toBe(0);
    expect(tiny.stderr).toContain('below one microdollar and kept as 0');
    expect(tiny.stderr).toContain('denies every run and call');
    await patchWorkspace({ user_daily_budget_usd: null });
  });

  it('when exec is given a misspelt option, then the error names it, not the missing --user', async () => {
    const [misspelt, missing] = await Promise.all([
      cli('exec', '--usr', 'alice', '--', 'true'),
      cli('exec', '--', 'true'),
    ]);
    expect(misspelt.code).toBe(1);
    expect(misspelt.stderr).toContain("unknown option '--usr'");
    expect(misspelt.stderr).not.toContain("required option '--user");
    expect(missing.stderr).toContain("required option '--user <id>' not specified");
  });
});

describe('settings shown', CLI_TESTS, () => {
  it('when limits or budget is given no argument (or show), then it prints the current values, also as JSON', async () => {
    await patchWorkspace({
      run_max_steps: 40,
      monthly_run_limit: 900,
      user_daily_budget_usd: 2.5,
      budget_mode: 'reserve',
    });
    // Reads only: all at once.
    const [limits, limitsShow, limitsJson, budget, budgetShow, budgetJson] = await Promise.all(
      [
        ['limits'],
        ['limits', 'show'],
        ['limits', '--json'],
        ['budget'],
        ['budget', 'show'],
        ['budget', 'show', '--json'],
      ].map((args) => cli(...args)),
    );
    for (const [args, shown] of [
      ['limits', limits],
      ['limits show', limitsShow],
    ] as const) {
      expect(shown, args).toMatchObject({ code: 0, stderr: '' });
      expect(shown.stdout).toMatch(/^monthly runs\s+900$/m);
      expect(shown.stdout).toMatch(/^steps per run\s+40$/m);
      expect(shown.stdout).toMatch(/^cost per run\s+off$/m);
    }
    expect(JSON.parse(limitsJson.stdout)).toMatchObject({
      monthly_run_limit: 900,
      run_max_steps: 40,
      run_max_cost_usd: null,
    });
    for (const [args, shown] of [
      ['budget', budget],
      ['budget show', budgetShow],
    ] as const) {
      expect(shown, args).toMatchObject({ code: 0, stderr: '' });
      expect(shown.stdout).toMatch(/^per-user daily budget\s+\$2\.50$/m);
      expect(shown.stdout).toMatch(/^budget mode\s+reserve$/m);
    }
    expect(JSON.parse(budgetJson.stdout)).toMatchObject({
      user_daily_budget_usd: 2.5,
      budget_mode: 'reserve',
    });
    // `set --json` stays the subcommand's option.
    expect(JSON.parse((await cli('limits', 'set', '--run-max-steps', 'none', '--json')).stdout).run_max_steps).toBe(
      null,
    );
    await patchWorkspace({ user_daily_budget_usd: null, budget_mode: 'spend', monthly_run_limit: 250_000 });
  });

  it('when status is run, then it shows every guard: budgets, budget mode, run limits and runaway limits', async () => {
    await patchWorkspace({ run_max_identical_calls: 5 });
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
    await patchWorkspace({ run_max_identical_calls: null });
  });
});

describe("the CLI's look", CLI_TESTS, () => {
  beforeAll(async () => {
    await fixture.api.request('PUT', '/v1/users/blocked-look', { blocked: true });
    await fixture.api.request('POST', '/v1/runs', { user_id: 'blocked-look' });
  });

  it('when output goes to a pipe, then there is no colour; FORCE_COLOR colours BLOCKED; NO_COLOR wins over it', async () => {
    const [piped, forced, noColor, json] = await Promise.all([
      cli('runs', 'list', '--user', 'blocked-look'),
      runCli(['runs', 'list', '--user', 'blocked-look'], { ...fixture.env, FORCE_COLOR: '1' }),
      runCli(['runs', 'list', '--user', 'blocked-look'], { ...fixture.env, FORCE_COLOR: '1', NO_COLOR: '1' }),
      runCli(['runs', 'list', '--json'], { ...fixture.env, FORCE_COLOR: '1' }),
    ]);
    expect(piped.stdout).toContain('BLOCKED');
    expect(piped.stdout).not.toContain(ESC);
    expect(forced.stdout).toContain(`${ESC}31mBLOCKED${ESC}39m`);
    // Columns are aligned as shown: the colour codes take no width.
    const strip = (text: string) => text.replace(/\u001b\[[0-9;]*m/g, '');
    expect(strip(forced.stdout)).toBe(piped.stdout);
    expect(noColor.stdout).not.toContain(ESC);
    expect(json.stdout).not.toContain(ESC);
  });

  it('when lists end, then runs and users share one footer, and money has one format', async () => {
    const [runs, users] = await Promise.all([cli('runs', 'list', '--user', 'blocked-look'), cli('users', 'list')]);
    expect(runs.stdout).toMatch(/\nPage 1 of 1 \(1 run\)\.\n$/);
    expect(runs.stdout).toMatch(/BLOCKED .* \$0\.00\s+-\s+USER_BLOCKED\n/);
    expect(runs.stdout).toMatch(/^ID\s+USER\s+STATUS\s+STARTED\s+ENDED\s+STEPS\s+TOKENS\s+COST\s+MODELS\s+DENIED\n/);
    expect(users.stdout).toMatch(/\nPage 1 of 1 \(\d+ users?\)\.\n$/);
    expect(users.stdout).toMatch(/blocked-look\s+yes\s+\$0\.00\s+workspace default/);
  });
});
