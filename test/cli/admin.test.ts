/**
 * The operator's commands for the workspace, as a user runs them: status, users, budget,
 * limits and keys, against a spawned daemon, checked through the API and through the rules.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { runCli } from '../support/daemon.js';
import { useCliDaemon } from '../support/cli-daemon.js';

const fixture = useCliDaemon();
const { cli } = fixture;

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

// Several CLI processes a test: each takes seconds on a loaded machine (7 s at a load of 14).
describe('operator commands', { timeout: 60_000 }, () => {
  it('when budgets and limits are set from the CLI, then the workspace and the next decisions follow them', async () => {
    // The budgets and the limits are different fields of the workspace, and a refusal changes
    // nothing: the commands run at once, each field's own in order.
    const [, limits, ...refused] = await Promise.all([
      (async () => {
        const budget = await cli('budget', 'set', '--workspace-daily', '12.5', '--user-daily', 'none');
        expect(budget.code).toBe(0);
        expect(budget.stdout).toMatch(/workspace daily budget\s+\$12\.50\n/);
        expect(budget.stdout).toMatch(/per-user daily budget\s+unlimited/);
        const deny = await cli('budget', 'set', '--unpriced-models', 'deny');
        expect(deny.stdout).toMatch(/unpriced models\s+deny/);
        expect((await cli('budget', 'set', '--unpriced-models', 'allow', '--json')).stdout).toContain(
          '"unpriced_models": "allow"',
        );
      })(),
      cli('limits', 'set', '--concurrent-runs', '1', '--monthly-runs', '2', '--json'),
      // The default workspace is on scale: these are above its ceilings, and the server says so.
      cli('limits', 'set', '--concurrent-runs', '500'),
      cli('limits', 'set', '--monthly-runs', 'none'),
    ]);
    for (const refusal of refused) {
      expect(refusal.code).toBe(1);
      expect(refusal.stderr).toMatch(/may not exceed \d+ on the scale plan/);
    }
    expect(limits.code).toBe(0);
    expect(JSON.parse(limits.stdout)).toMatchObject({ max_concurrent_runs: 1, monthly_run_limit: 2 });
    expect((await fixture.api.request('GET', '/v1/workspace')).body).toMatchObject({
      daily_budget_usd: 12.5,
      user_daily_budget_usd: null,
      max_concurrent_runs: 1,
      monthly_run_limit: 2,
    });
    const first = await fixture.api.request('POST', '/v1/runs', { user_id: 'u' });
    expect((await fixture.api.request('POST', '/v1/runs', { user_id: 'u' })).body.decision.reason).toBe(
      'MAX_CONCURRENT_RUNS_EXCEEDED',
    );
    await fixture.api.request('POST', `/v1/runs/${first.body.id}/end`, { status: 'COMPLETED' });
  });

  it('when users are blocked, unblocked and budgeted, then the list shows it and the rules apply it', async () => {
    // Two users and the workspace: each change is its own, so they are made at once.
    const [, blocked, budgeted] = await Promise.all([
      patchWorkspace({ max_concurrent_runs: 100, monthly_run_limit: 1000 }),
      cli('users', 'block', 'mallory'),
      cli('users', 'budget', 'alice', '0'),
    ]);
    expect(blocked.stdout).toBe('mallory is blocked.\n');
    expect((await fixture.api.request('POST', '/v1/runs', { user_id: 'mallory' })).body.decision.reason).toBe(
      'USER_BLOCKED',
    );
    expect(budgeted.code).toBe(0);
    expect((await fixture.api.request('POST', '/v1/runs', { user_id: 'alice' })).body.decision.reason).toBe(
      'USER_DAILY_BUDGET_EXCEEDED',
    );
    const [list, table] = await Promise.all([cli('users', 'list', '--blocked', '--json'), cli('users', 'list')]);
    expect(JSON.parse(list.stdout).items.map((u: { user_id: string }) => u.user_id)).toEqual(['mallory']);
    expect(table.stdout).toMatch(/^USER\s+BLOCKED\s+SPEND TODAY/);
    expect(table.stdout).toMatch(/alice\s+no\s+\$0\.00\s+\$0\.00/);
    const [, , refused] = await Promise.all([
      cli('users', 'unblock', 'mallory'),
      cli('users', 'budget', 'alice', 'none'),
      cli('users', 'budget', 'alice', 'lots'),
    ]);
    expect((await fixture.api.request('POST', '/v1/runs', { user_id: 'mallory' })).body.status).toBe('RUNNING');
    expect((await fixture.api.request('POST', '/v1/runs', { user_id: 'alice' })).body.status).toBe('RUNNING');
    expect(refused.code).toBe(1);
  });

  it("when status is asked, then it shows health, the kill switch and today's usage", async () => {
    await setKillSwitch(true);
    const [status, asJson] = await Promise.all([cli('status'), cli('status', '--json')]);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/^daemon\s+ok/);
    expect(status.stdout).toMatch(/kill switch\s+ON/);
    expect(status.stdout).toMatch(/runs this month\s+\d+ of 1000/);
    const json = JSON.parse(asJson.stdout);
    expect(json).toMatchObject({
      health: { status: 'ok' },
      workspace: { kill_switch_active: true },
      usage: { monthly_run_limit: 1000 },
    });
    await setKillSwitch(false);
  });

  // Eleven CLI processes, most one after another (each regeneration needs the last): 120 s.
  it('when keys are listed and regenerated, then the old key stops working and the new one is printed once', async () => {
    const [list, unconfirmed] = await Promise.all([cli('keys', 'list', '--json'), cli('keys', 'regenerate')]);
    expect(JSON.parse(list.stdout)).toHaveLength(1);
    // The secret is base64url and may itself hold '_': take everything after the prefix.
    expect(list.stdout).not.toContain(fixture.daemon.apiKey.split('_').slice(2).join('_'));
    expect(unconfirmed.code).toBe(1); // needs --yes
    const regenerated = await cli('keys', 'regenerate', '--yes', '--json');
    const fresh = JSON.parse(regenerated.stdout).api_key as string;
    expect((await fixture.api.request('GET', '/v1/runs')).status).toBe(401);
    // The daemon keeps its key file: the CLI (which read its key there) and header-less loopback
    // proxy calls go on with the new key, without an edit or a restart.
    expect((await readFile(join(fixture.daemon.dataDir, 'api-key'), 'utf8')).trim()).toBe(fresh);
    const [withFresh, withFile] = await Promise.all([
      runCli(['keys', 'list'], { ...fixture.env, RUNGUARD_API_KEY: fresh }),
      cli('keys', 'list'),
    ]);
    expect(withFresh.stdout).toMatch(/revoked/);
    expect(withFile.code).toBe(0);
    const proxied = await fetch(`${fixture.daemon.url}/proxy/runs/${randomUUID()}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":"m","messages":[]}',
    });
    expect(proxied.status).toBe(404); // past the key check: the run does not exist
    const again = await cli('keys', 'regenerate', '--yes');
    expect(again.stdout).toContain(
      `The daemon saved it in ${join(fixture.daemon.dataDir, 'api-key')}, which the CLI and npx runguard exec read.`,
    );
    expect((await cli('status')).code).toBe(0);
    // A key file the daemon does not keep (another data directory) is named as stale.
    const elsewhere = await mkdtemp(join(tmpdir(), 'rg-keys-'));
    try {
      await writeFile(join(elsewhere, 'api-key'), await readFile(join(fixture.daemon.dataDir, 'api-key'), 'utf8'));
      const stale = await runCli(['keys', 'regenerate', '--yes'], {
        RUNGUARD_URL: fixture.daemon.url,
        RUNGUARD_DATA_DIR: elsewhere,
      });
      expect(stale.stdout).toContain(
        `${join(elsewhere, 'api-key')} still holds the revoked key: put the new one there, or pass --api-key.`,
      );
    } finally {
      await rm(elsewhere, { recursive: true, force: true });
    }
    expect((await cli('status')).code).toBe(0);

    // A key file the daemon cannot write: the new key is still answered (it is shown nowhere else).
    const blocker = join(fixture.daemon.dataDir, `api-key.${fixture.daemon.process.pid}.tmp`);
    await mkdir(blocker);
    try {
      const unsaved = await cli('keys', 'regenerate', '--yes', '--json');
      expect(unsaved.code).toBe(0);
      const issued = JSON.parse(unsaved.stdout).api_key as string;
      expect((await runCli(['status'], { ...fixture.env, RUNGUARD_API_KEY: issued })).code).toBe(0);
      expect(fixture.daemon.stdout() + fixture.daemon.stderr()).toContain(
        'the local key file could not take the regenerated key',
      );
      await writeFile(join(fixture.daemon.dataDir, 'api-key'), `${issued}\n`);
    } finally {
      await rm(blocker, { recursive: true, force: true });
    }
  }, 120_000);

  it('when the counters drift from the records, then reconcile reports it, repairs it, and finds none after', async () => {
    const db = new pg.Client({ connectionString: fixture.daemon.database.url });
    await db.connect();
    try {
      await db.query('UPDATE usage_daily SET runs = runs + 40');
      const dbEnv = { ...fixture.env, DATABASE_URL: fixture.daemon.database.url };
      const dry = await runCli(['reconcile', '--dry-run'], dbEnv);
      expect(dry.code).toBe(4);
      expect(dry.stdout).toMatch(/workspace_usage\s+\S+\s+spend=\d+ runs=\d+\s+spend=\d+ runs=\d+/);
      expect(dry.stdout).toContain('nothing changed (--dry-run)');
      const fixed = await runCli(['reconcile', '--json'], dbEnv);
      expect(fixed.code).toBe(0);
      expect(JSON.parse(fixed.stdout)).toMatchObject({
        repaired: true,
        drifts: [expect.objectContaining({ kind: 'workspace_usage' })],
      });
      const clean = await runCli(['reconcile'], dbEnv);
      expect(clean).toMatchObject({ code: 0, stdout: expect.stringContaining('No drift') });
    } finally {
      await db.end();
    }
  });
});
