/** `runguard pricing delete`, `keys revoke`, `users delete` and `retention` against a real daemon on Postgres. */
import { describe, expect, it } from 'vitest';
import { postgresDb } from '../../src/store/db.js';
import { createApiKey } from '../../src/store/workspaces.js';
import { caller } from '../support/harness.js';
import { runCli } from '../support/daemon.js';
import { useCliDaemon } from '../support/cli-daemon.js';

const fixture = useCliDaemon();
const { cli } = fixture;

describe('deletion from the CLI', () => {
  it('when a price is deleted, then it is gone; an unknown model fails naming it', async () => {
    await fixture.api.request('PUT', '/v1/model-pricing/gpt-x', {
      input_cost_per_token: 0.000001,
      output_cost_per_token: 0.000002,
    });
    // As users delete: said, not done, without --yes.
    const unconfirmed = await cli('pricing', 'delete', 'gpt-x');
    expect(unconfirmed).toMatchObject({ code: 1, stdout: '' });
    expect(unconfirmed.stderr).toMatch(/run again with --yes/);
    const deleted = await cli('pricing', 'delete', 'gpt-x', '--yes');
    expect(deleted).toMatchObject({ code: 0, stdout: 'Deleted the price of gpt-x.\n' });
    const models = ((await fixture.api.request('GET', '/v1/model-pricing')).body as { model: string }[]).map(
      (p) => p.model,
    );
    expect(models).not.toContain('gpt-x');
    expect(models).toContain('gpt-4o-mini'); // the shipped catalog, loaded at creation, stays
    const again = await cli('pricing', 'delete', 'gpt-x', '--yes');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('The workspace has no pricing entry for "gpt-x".');
  });

  it('when a key is revoked, then it stops working; the last active key is refused with the way out', async () => {
    const db = postgresDb({ connectionString: fixture.daemon.database.url, max: 1 });
    try {
      const [only] = (await fixture.api.request('GET', '/v1/api-keys')).body;
      const refused = await cli('keys', 'revoke', only.id);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/last active API key.*npx runguard keys regenerate --yes/);
      const {
        rows: [owner],
      } = await db.query<{ workspace_id: string }>('SELECT workspace_id FROM api_keys WHERE id = $1', [only.id]);
      const second = await createApiKey(db, owner!.workspace_id);
      const revoked = await cli('keys', 'revoke', second.id);
      expect(revoked).toMatchObject({
        code: 0,
        stdout: `Key ${second.id} is revoked: clients using it get 401 from now on.\n`,
      });
      expect((await caller(fixture.daemon.url, second.apiKey).request('GET', '/v1/workspace')).status).toBe(401);
    } finally {
      await db.close();
    }
  });

  it('when a user is deleted, then --yes is required, and a user with a run this month is refused', async () => {
    const [unconfirmed] = await Promise.all([
      cli('users', 'delete', 'carol'),
      fixture.api.request('PUT', '/v1/users/dave', { blocked: true }),
    ]);
    expect(unconfirmed.stderr).toMatch(/run again with --yes/);
    await fixture.api.request('POST', '/v1/runs', { user_id: 'carol' });
    const refused = await cli('users', 'delete', 'carol', '--yes');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/carol has 1 run\(s\) RUNNING or inside a counted window/);
    expect(await cli('users', 'delete', 'dave', '--yes')).toMatchObject({
      code: 0,
      stdout: 'Deleted dave and 0 runs.\n',
    });
    expect((await cli('users', 'delete', 'dave', '--yes')).stderr).toContain('The workspace has no user with this id.');
  });

  it('when retention is set, then it must be 35 days or more, and none keeps runs forever', async () => {
    // A refusal changes nothing: it runs beside the first read.
    const [shown, short] = await Promise.all([cli('retention'), cli('retention', '30')]);
    expect(shown.stdout).toBe('Runs are kept forever (no retention).\n');
    expect(short.code).not.toBe(0);
    expect(short.stderr).toMatch(/at least 35/);
    expect((await cli('retention', '90')).stdout).toBe(
      'Ended runs are deleted 90 days after they end (checked hourly, in batches).\n',
    );
    expect((await fixture.api.request('GET', '/v1/workspace')).body.retention_days).toBe(90);
    expect(JSON.parse((await cli('retention', 'none', '--json')).stdout)).toEqual({ retention_days: null });
  });

  // Last: it revokes the key the other tests use.
  it('when the CLI revokes its own key, then it says so, and another key goes on working', async () => {
    const db = postgresDb({ connectionString: fixture.daemon.database.url, max: 1 });
    try {
      const [own] = (await fixture.api.request('GET', '/v1/api-keys')).body.filter((k: any) => !k.revoked_at);
      const {
        rows: [owner],
      } = await db.query<{ workspace_id: string }>('SELECT workspace_id FROM api_keys WHERE id = $1', [own.id]);
      const other = await createApiKey(db, owner!.workspace_id);
      const revoked = await cli('keys', 'revoke', own.id);
      expect(revoked.code).toBe(0);
      expect(revoked.stderr).toMatch(/that is the key this CLI used \(from .*api-key\)/);
      expect((await fixture.api.request('GET', '/v1/workspace')).status).toBe(401);
      expect((await runCli(['keys', 'list'], { ...fixture.env, RUNGUARD_API_KEY: other.apiKey })).code).toBe(0);
    } finally {
      await db.close();
    }
  });
});
