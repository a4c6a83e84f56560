/**
 * Where webhooks may not go, and the pieces of delivery that need no daemon: the outbound policy
 * at creation and at every attempt (a receiver on loopback, refused without the setting), the
 * backoff, the Slack text, and the result.lost function another component calls.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pino from 'pino';
import { ConfigError, loadConfig } from '../../src/config.js';
import { recordEvent, recordResultLost } from '../../src/service/webhook-events.js';
import { insertEndpoint } from '../../src/store/webhooks.js';
import { parseRetryAfter, retryDelayMs } from '../../src/webhooks/backoff.js';
import { WebhookDispatcher } from '../../src/webhooks/dispatcher.js';
import { checkAddress, OutboundRefused } from '../../src/webhooks/outbound-policy.js';
import { slackText } from '../../src/webhooks/payload.js';
import { generateSecret } from '../../src/webhooks/signing.js';
import { startTestApi, type TestApi } from '../support/harness.js';
import { startReceiver, type Receiver } from '../support/webhook-receiver.js';

describe('outbound safety', () => {
  let api: TestApi;
  let receiver: Receiver;
  beforeAll(async () => {
    api = await startTestApi('postgres+sql');
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await api?.close();
    await receiver?.close();
  });

  it('when a webhook URL is private, loopback, link-local, not http(s) or carries credentials, then creating it is refused (400)', async () => {
    for (const url of [
      receiver.url,
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
      const answer = await api.request('POST', '/v1/webhooks', { url });
      expect([answer.status, answer.body.code], url).toEqual([400, 'WEBHOOK_URL_REFUSED']);
    }
    expect((await api.request('GET', '/v1/webhooks')).body).toEqual([]);
  });

  it('when an endpoint points at a private address, then each attempt is refused on the resolved address and nothing is sent', async () => {
    // Stored directly: as if the name had resolved elsewhere when it was created (DNS rebinding).
    const endpoint = await insertEndpoint(
      api.stores.db,
      {
        workspaceId: api.workspaceId,
        url: `${receiver.url}/rebound`,
        description: null,
        events: ['user.blocked'],
        format: 'standard',
        secret: generateSecret(),
      },
      new Date(),
    );
    await api.request('PUT', '/v1/users/eve', { blocked: true });
    const dispatcher = new WebhookDispatcher({
      db: api.stores.db,
      clock: { now: () => new Date() },
      logger: pino({ level: 'silent' }),
      policy: { allowPrivate: false, ownPort: null },
      userAgent: 'test',
      concurrency: 2,
      timeoutMs: 1_000,
      pollIntervalMs: 0,
      retryBaseMs: 60_000,
      maxAgeMs: 86_400_000,
      scanIntervalMs: 60_000,
      denialWindowMs: 60_000,
      thresholdsPpm: [],
      retentionMs: 86_400_000,
    });
    await dispatcher.tick();
    await dispatcher.stop();
    const log = (await api.request('GET', `/v1/webhooks/${endpoint.id}/deliveries`)).body;
    expect(log.items).toHaveLength(1);
    expect(log.items[0]).toMatchObject({ status: 'pending', attempts: 1, last_status_code: null });
    expect(log.items[0].last_error).toMatch(
      /resolves to 127\.0\.0\.1, a loopback, link-local, private or reserved address/,
    );
    expect(receiver.received).toEqual([]);
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
  let api: TestApi;
  let receiver: Receiver;
  beforeAll(async () => {
    api = await startTestApi('postgres+sql');
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await api?.close();
    await receiver?.close();
  });

  /** One event to a new endpoint, one round of a dispatcher that may reach loopback; the delivery after it. */
  async function deliverOnce(path: string) {
    const endpoint = await insertEndpoint(
      api.stores.db,
      {
        workspaceId: api.workspaceId,
        url: `${receiver.url}${path}`,
        description: null,
        events: ['user.blocked'],
        format: 'standard',
        secret: generateSecret(),
      },
      new Date(),
    );
    await api.stores.db.transaction((tx) =>
      recordEvent(tx, api.workspaceId, 'user.blocked', { user_id: 'x' }, new Date(), { endpointId: endpoint.id }),
    );
    const dispatcher = new WebhookDispatcher({
      db: api.stores.db,
      clock: { now: () => new Date() },
      logger: pino({ level: 'silent' }),
      policy: { allowPrivate: true, ownPort: null },
      userAgent: 'test',
      concurrency: 2,
      timeoutMs: 500,
      pollIntervalMs: 0,
      retryBaseMs: 1_000,
      maxAgeMs: 86_400_000,
      scanIntervalMs: 60_000,
      denialWindowMs: 60_000,
      thresholdsPpm: [],
      retentionMs: 86_400_000,
    });
    const started = Date.now();
    await dispatcher.tick();
    await dispatcher.stop();
    const [delivery] = (await api.request('GET', `/v1/webhooks/${endpoint.id}/deliveries`)).body.items;
    const after = (await api.request('GET', `/v1/webhooks/${endpoint.id}`)).body;
    return { delivery, endpoint: after, started };
  }

  it('when the receiver answers 410 Gone, then the endpoint is disabled and the delivery ends', async () => {
    receiver.mode = { status: 410 };
    const { delivery, endpoint } = await deliverOnce('/gone');
    expect(delivery).toMatchObject({ status: 'failed', attempts: 1, last_status_code: 410 });
    expect(endpoint).toMatchObject({
      enabled: false,
      disabled_reason: expect.stringMatching(/^The endpoint answered 410 Gone at /),
    });
  });

  it('when the receiver asks to Retry-After an hour, then the next attempt waits that long', async () => {
    receiver.mode = { status: 503, headers: { 'retry-after': '3600' } };
    const { delivery, started } = await deliverOnce('/busy');
    expect(delivery).toMatchObject({ status: 'pending', attempts: 1, last_status_code: 503 });
    expect(Date.parse(delivery.next_attempt_at) - started).toBeGreaterThanOrEqual(3_600_000);
  });

  it('when the receiver redirects, then the redirect is not followed and the attempt failed', async () => {
    receiver.mode = { status: 302, headers: { location: `${receiver.url}/elsewhere` } };
    const { delivery } = await deliverOnce('/moved');
    expect(delivery).toMatchObject({ status: 'pending', last_status_code: 302 });
    expect(receiver.received.filter((r) => r.path === '/elsewhere')).toEqual([]);
  });

  it('when the receiver never answers, then the attempt ends at its timeout and is retried later', async () => {
    receiver.mode = 'hang';
    const { delivery } = await deliverOnce('/slow');
    expect(delivery).toMatchObject({ status: 'pending', attempts: 1, last_status_code: null, last_error: 'timed out' });
    receiver.mode = { status: 200 };
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
  let api: TestApi;
  let receiver: Receiver;
  beforeAll(async () => {
    api = await startTestApi('postgres+sql');
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await api?.close();
    await receiver?.close();
  });

  it('when crash recovery records a lost result twice, then one event is queued for the endpoints that want it', async () => {
    const endpoint = await insertEndpoint(
      api.stores.db,
      {
        workspaceId: api.workspaceId,
        url: `${receiver.url}/lost`,
        description: null,
        events: ['result.lost'],
        format: 'standard',
        secret: generateSecret(),
      },
      new Date(),
    );
    const lost = {
      workspaceId: api.workspaceId,
      runId: 'r1',
      stepId: 's1',
      userId: 'alice',
      provider: 'openai',
      model: 'gpt-x',
      reason: 'the daemon stopped',
    };
    const first = await api.stores.db.transaction((tx) => recordResultLost(tx, lost, new Date()));
    const again = await api.stores.db.transaction((tx) => recordResultLost(tx, lost, new Date()));
    expect([first, again]).toEqual([true, false]);
    const log = (await api.request('GET', `/v1/webhooks/${endpoint.id}/deliveries`)).body;
    expect(log.items.map((d: any) => [d.event_type, d.status])).toEqual([['result.lost', 'pending']]);
  });
});
