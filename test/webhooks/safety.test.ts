/**
 * Where webhooks may not go, and the pieces of delivery that need no daemon: the outbound policy
 * at creation and at every attempt (a receiver on loopback, refused without the setting), the
 * backoff, the Slack text, and the result.lost function another component calls.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pino from 'pino';
import { ConfigError, loadConfig } from '../../src/config.js';
import { recordEvent, recordResultLost } from '../../src/webhooks/webhook-events.js';
import { insertEndpoint } from '../../src/store/webhooks.js';
import { parseRetryAfter, retryDelayMs } from '../../src/webhooks/backoff.js';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.js';
import { checkAddress, OutboundRefused } from '../../src/webhooks/outbound-policy.js';
import { slackText } from '../../src/webhooks/payload.js';
import { generateSecret } from '../../src/webhooks/signing.js';
import { startTestApi, type TestApi } from '../support/harness.js';
import { startReceiver, type Receiver } from '../support/webhook-receiver.js';

/**
 * A test API on Postgres and a webhook receiver on loopback, for one describe block: started
 * before its tests, stopped after them. The fields are set once its `beforeAll` ran.
 */
function useApiAndReceiver(): { api: TestApi; receiver: Receiver } {
  const fixture = {} as { api: TestApi; receiver: Receiver };
  beforeAll(async () => {
    fixture.api = await startTestApi('postgres+sql');
    fixture.receiver = await startReceiver();
  });
  afterAll(async () => {
    await fixture.api?.close();
    await fixture.receiver?.close();
  });
  return fixture;
}

/** An endpoint stored directly, past the checks of POST /v1/webhooks (which refuse the loopback receiver). */
function endpointTo(api: TestApi, url: string, event: string) {
  return insertEndpoint(
    api.stores.db,
    {
      workspaceId: api.workspaceId,
      url,
      description: null,
      events: [event],
      format: 'standard',
      secret: generateSecret(),
    },
    new Date(),
  );
}

/** A dispatcher on the API's database, one tick at a time; what a test varies is its policy and timings. */
function dispatcherFor(
  api: TestApi,
  { allowPrivate, timeoutMs, retryBaseMs }: { allowPrivate: boolean; timeoutMs: number; retryBaseMs: number },
) {
  return new WebhookDispatcher({
    db: api.stores.db,
    clock: { now: () => new Date() },
    logger: pino({ level: 'silent' }),
    policy: { allowPrivate, ownPort: null },
    userAgent: 'test',
    concurrency: 2,
    timeoutMs,
    pollIntervalMs: 0,
    retryBaseMs,
    maxAgeMs: 86_400_000,
    scanIntervalMs: 60_000,
    denials: { windowMs: 60_000, settleMs: 10_000 },
    thresholdsPpm: [],
    retentionMs: 86_400_000,
  });
}

describe('outbound safety', () => {
  const fixture = useApiAndReceiver();

  it('when a webhook URL is private, loopback, link-local, not http(s) or carries credentials, then creating it is refused (400)', async () => {
    for (const url of [
      fixture.receiver.url,
      'http://localhost:9/x',
      'http://10.1.2.3/',
      'http://192.168.1.1/',
      'http://172.16.0.1/',
      'http://169.254.169.254/latest',
      'http://[::1]:8080/',
      'http://[fe80::1]/',
      'http://[::ffff:127.0.0.1]/',
      'http://0.0.0.0/',
      'ftp://example.com/',
      'file:///etc/passwd',
      'https://user:pass@example.com/',
    ]) {
      const answer = await fixture.api.request('POST', '/v1/webhooks', { url });
      expect([answer.status, answer.body.code], url).toEqual([400, 'WEBHOOK_URL_REFUSED']);
    }
    expect((await fixture.api.request('GET', '/v1/webhooks')).body).toEqual([]);
  });

  it('when an endpoint points at a private address, then each attempt is refused on the resolved address and nothing is sent', async () => {
    // Stored directly: as if the name had resolved elsewhere when it was created (DNS rebinding).
    const endpoint = await endpointTo(fixture.api, `${fixture.receiver.url}/rebound`, 'user.blocked');
    await fixture.api.request('PUT', '/v1/users/eve', { blocked: true });
    const dispatcher = dispatcherFor(fixture.api, { allowPrivate: false, timeoutMs: 1_000, retryBaseMs: 60_000 });
    await dispatcher.tick();
    await dispatcher.stop();
    const log = (await fixture.api.request('GET', `/v1/webhooks/${endpoint.id}/deliveries`)).body;
    expect(log.items).toHaveLength(1);
    expect(log.items[0]).toMatchObject({ status: 'pending', attempts: 1, last_status_code: null });
    expect(log.items[0].last_error).toMatch(
      /resolves to 127\.0\.0\.1, a loopback, link-local, private or reserved address/,
    );
    expect(fixture.receiver.received).toEqual([]);
  });

  it("when private targets are allowed, then loopback passes but the daemon's own port never does", () => {
    const allowed = { allowPrivate: true, ownPort: 8787 };
    expect(() => checkAddress(new URL('http://127.0.0.1:9000/'), '127.0.0.1', allowed)).not.toThrow();
    expect(() => checkAddress(new URL('http://127.0.0.1:8787/'), '127.0.0.1', allowed)).toThrow(OutboundRefused);
    expect(() => checkAddress(new URL('http://localhost:8787/'), '::1', allowed)).toThrow(/own port/);
    expect(() =>
      checkAddress(new URL('https://example.com/'), '93.184.215.14', { allowPrivate: false, ownPort: 443 }),
    ).not.toThrow();
  });
});

describe('what the receiver answers', () => {
  const fixture = useApiAndReceiver();

  /** One event to a new endpoint, one round of a dispatcher that may reach loopback; the delivery after it. */
  async function deliverOnce(path: string) {
    const endpoint = await endpointTo(fixture.api, `${fixture.receiver.url}${path}`, 'user.blocked');
    await fixture.api.stores.db.transaction((tx) =>
      recordEvent(tx, fixture.api.workspaceId, 'user.blocked', { user_id: 'x' }, new Date(), {
        endpointId: endpoint.id,
      }),
    );
    const dispatcher = dispatcherFor(fixture.api, { allowPrivate: true, timeoutMs: 500, retryBaseMs: 1_000 });
    const started = Date.now();
    await dispatcher.tick();
    await dispatcher.stop();
    const [delivery] = (await fixture.api.request('GET', `/v1/webhooks/${endpoint.id}/deliveries`)).body.items;
    const after = (await fixture.api.request('GET', `/v1/webhooks/${endpoint.id}`)).body;
    return { delivery, endpoint: after, started };
  }

  it('when the receiver answers 410 Gone, then the endpoint is disabled and the delivery ends', async () => {
    fixture.receiver.mode = { status: 410 };
    const { delivery, endpoint } = await deliverOnce('/gone');
    expect(delivery).toMatchObject({ status: 'failed', attempts: 1, last_status_code: 410 });
    expect(endpoint).toMatchObject({
      enabled: false,
      disabled_reason: expect.stringMatching(/^The endpoint answered 410 Gone at /),
    });
  });

  it('when the receiver asks to Retry-After an hour, then the next attempt waits that long', async () => {
    fixture.receiver.mode = { status: 503, headers: { 'retry-after': '3600' } };
    const { delivery, started } = await deliverOnce('/busy');
    expect(delivery).toMatchObject({ status: 'pending', attempts: 1, last_status_code: 503 });
    expect(Date.parse(delivery.next_attempt_at) - started).toBeGreaterThanOrEqual(3_600_000);
  });

  it('when the receiver redirects, then the redirect is not followed and the attempt failed', async () => {
    fixture.receiver.mode = { status: 302, headers: { location: `${fixture.receiver.url}/elsewhere` } };
    const { delivery } = await deliverOnce('/moved');
    expect(delivery).toMatchObject({ status: 'pending', last_status_code: 302 });
    expect(fixture.receiver.received.filter((r) => r.path === '/elsewhere')).toEqual([]);
  });

  it('when the receiver never answers, then the attempt ends at its timeout and is retried later', async () => {
    fixture.receiver.mode = 'hang';
    const { delivery } = await deliverOnce('/slow');
    expect(delivery).toMatchObject({ status: 'pending', attempts: 1, last_status_code: null, last_error: 'timed out' });
    fixture.receiver.mode = { status: 200 };
  });
});

describe('delivery pieces', () => {
  it('when attempts fail, then delays grow exponentially with jitter, up to an hour, and a longer Retry-After wins', () => {
    expect(retryDelayMs(1, 5_000, null, () => 0)).toBe(2_500);
    expect(retryDelayMs(1, 5_000, null, () => 1)).toBe(5_000);
    expect(retryDelayMs(4, 5_000, null, () => 1)).toBe(40_000);
    expect(retryDelayMs(30, 5_000, null, () => 1)).toBe(3_600_000);
    expect(retryDelayMs(1, 5_000, 120_000, () => 1)).toBe(120_000);
    const now = new Date('2026-11-26T12:00:00Z');
    expect(parseRetryAfter('7', now)).toBe(7_000);
    expect(parseRetryAfter('Thu, 26 Nov 2026 12:01:00 GMT', now)).toBe(60_000);
    expect(parseRetryAfter('soon', now)).toBeNull();
  });

  it('when an event goes to a Slack-compatible endpoint, then it reads as a sentence', () => {
    const at = new Date();
    expect(
      slackText({
        id: 'evt_1',
        type: 'budget.threshold',
        workspace_id: 'w',
        created_at: at,
        data: {
          subject: { type: 'user', id: 'alice' },
          day: '2026-11-26',
          threshold: 0.8,
          spend_usd: 8.25,
          budget_usd: 10,
        },
      }),
    ).toBe(
      'runguard · budget.threshold: user `alice` has spent $8.25 of its $10.00 daily budget on 2026-11-26 (80% threshold).',
    );
    expect(
      slackText({
        id: 'evt_3',
        type: 'budget.threshold',
        workspace_id: 'w',
        created_at: at,
        data: {
          subject: { type: 'user', id: 'ana' },
          day: '2026-11-26',
          threshold: 1,
          spend_usd: 5.5,
          budget_usd: 5,
          budget_id: 'b1',
          scope: 'user',
          period: 'week',
          action: 'alert',
          window_start: '2026-11-23',
          resets_at: '2026-11-30T05:00:00Z',
        },
      }),
    ).toBe(
      'runguard · budget.threshold: user `ana` has spent $5.50 of its $5.00 weekly budget (alert) since 2026-11-23 (100% threshold); it resets at 2026-11-30T05:00:00Z.',
    );
    expect(
      slackText({
        id: 'evt_2',
        type: 'kill_switch.changed',
        workspace_id: 'w',
        created_at: at,
        data: { active: true, actor: { type: 'api_key', id: 'k1' } },
      }),
    ).toContain('the kill switch is now ON');
  });
});

describe('webhook configuration', () => {
  it('when thresholds come from the environment, then they are read as sorted fractions; nonsense names the key', () => {
    expect(loadConfig({}).webhookBudgetThresholds).toEqual([0.5, 0.8, 1]);
    expect(loadConfig({}).webhookAllowPrivate).toBe(false);
    expect(loadConfig({ RUNGUARD_WEBHOOK_BUDGET_THRESHOLDS: '0.95, 0.8' }).webhookBudgetThresholds).toEqual([
      0.8, 0.95,
    ]);
    expect(loadConfig({ RUNGUARD_WEBHOOK_ALLOW_PRIVATE: 'true' }).webhookAllowPrivate).toBe(true);
    expect(() => loadConfig({ RUNGUARD_WEBHOOK_BUDGET_THRESHOLDS: '0.5,lots' })).toThrow(ConfigError);
    expect(() => loadConfig({ RUNGUARD_WEBHOOK_BUDGET_THRESHOLDS: '-1' })).toThrow(
      /RUNGUARD_WEBHOOK_BUDGET_THRESHOLDS/,
    );
  });
});

describe('result.lost', () => {
  const fixture = useApiAndReceiver();

  it('when crash recovery records a lost result twice, then one event is queued for the endpoints that want it', async () => {
    const endpoint = await endpointTo(fixture.api, `${fixture.receiver.url}/lost`, 'result.lost');
    const lost = {
      workspaceId: fixture.api.workspaceId,
      runId: 'r1',
      stepId: 's1',
      userId: 'alice',
      provider: 'openai',
      model: 'gpt-x',
      reason: 'the daemon stopped',
    };
    const first = await fixture.api.stores.db.transaction((tx) => recordResultLost(tx, lost, new Date()));
    const again = await fixture.api.stores.db.transaction((tx) => recordResultLost(tx, lost, new Date()));
    expect([first, again]).toEqual([true, false]);
    const log = (await fixture.api.request('GET', `/v1/webhooks/${endpoint.id}/deliveries`)).body;
    expect(log.items.map((d: any) => [d.event_type, d.status])).toEqual([['result.lost', 'pending']]);
  });
});
