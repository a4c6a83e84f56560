/**
 * An upstream that cannot be reached is named wherever the failure shows: the proxy's answer to
 * the agent, the step's error, `runs show`, exec's summary; `status` shows every upstream and the
 * variable that sets it.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, runCli, spawnDaemonOnPostgres } from '../support/daemon.js';

const AGENT = fileURLToPath(new URL('../fixtures/agent.mjs', import.meta.url));

let daemon: Awaited<ReturnType<typeof spawnDaemonOnPostgres>>;
let upstream: string;
let env: Record<string, string>;

beforeAll(async () => {
  // Nothing listens there: every call is refused.
  upstream = `http://127.0.0.1:${await freePort()}`;
  daemon = await spawnDaemonOnPostgres({ env: { RUNGUARD_OPENAI_UPSTREAM: upstream } });
  env = { RUNGUARD_URL: daemon.url, RUNGUARD_API_KEY: daemon.apiKey! };
});
afterAll(() => daemon?.close());

const named = (host: string) =>
  `The provider could not be reached (openai at ${host}, set by RUNGUARD_OPENAI_UPSTREAM: ECONNREFUSED).`;

describe('an unreachable upstream', { timeout: 60_000 }, () => {
  it("when the agent's call cannot reach it, then the answer, the step, runs show and exec's summary name it", async () => {
    const host = new URL(upstream).host;
    const direct = await fetch(`${daemon.url}/proxy/openai/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-runguard-key': daemon.apiKey!,
        'x-runguard-user-id': 'direct',
        authorization: 'Bearer sk-test',
      },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(direct.status).toBe(502);
    expect(((await direct.json()) as { error: { message: string } }).error.message).toBe(named(host));

    const result = await runCli(['exec', '--user', 'agent', '--', process.execPath, AGENT, '0'], env);
    expect(result.code).not.toBe(0);
    const summary = result.stderr.split('\n').find((line) => line.startsWith('runguard: run '));
    expect(summary).toContain(`1 failed (UPSTREAM_UNAVAILABLE: ${named(host)})`);
    const runId = /^runguard: run (\S+)/.exec(summary!)![1]!;

    const [shown, asJson] = await Promise.all([
      runCli(['runs', 'show', runId], env),
      runCli(['runs', 'show', runId, '--json'], env),
    ]);
    expect(shown.stdout).toContain(`Step 1 failed: UPSTREAM_UNAVAILABLE: ${named(host)}`);
    const run = JSON.parse(asJson.stdout);
    expect(run.steps[0].output_data).toMatchObject({ error: 'UPSTREAM_UNAVAILABLE', detail: named(host) });
  });

  it('when status is run, then it shows each upstream and the variable that sets it', async () => {
    const [status, asJson] = await Promise.all([runCli(['status'], env), runCli(['status', '--json'], env)]);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(new RegExp(`^upstream openai\\s+${upstream} \\(RUNGUARD_OPENAI_UPSTREAM\\)$`, 'm'));
    expect(status.stdout).toMatch(
      /^upstream anthropic\s+https:\/\/api\.anthropic\.com \(RUNGUARD_ANTHROPIC_UPSTREAM\)$/m,
    );
    const json = JSON.parse(asJson.stdout);
    expect(json.providers).toContainEqual({
      name: 'openai',
      type: 'openai',
      upstream,
      set_by: 'RUNGUARD_OPENAI_UPSTREAM',
    });
  });
});
