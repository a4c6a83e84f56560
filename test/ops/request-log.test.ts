/**
 * One `info` line per proxied call and per API request (issue #54, item 7): who, which run and
 * model, what was decided, how it ended, tokens, cost and time. The detail is at `debug`. The real
 * app on a socket, in front of a fake upstream, its log captured.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { captureLog, type CapturedLog } from '../support/log-capture.js';

const chat = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });

type Line = Record<string, unknown>;

const apis: ProxyTestApi[] = [];
afterAll(async () => {
  await Promise.all(apis.map((api) => api.close()));
});

async function started(level: string): Promise<{ api: ProxyTestApi; log: CapturedLog }> {
  const log = captureLog(level);
  const api = await startProxyTestApi('postgres+redis', { logger: log.logger });
  apis.push(api);
  return { api, log };
}

/** A proxied call with a run's token; answers the token, the run and the lines written for it. */
async function proxiedCall(api: ProxyTestApi, log: CapturedLog) {
  const run = await api.request('POST', '/v1/runs', { user_id: 'agent-7' });
  const minted = await api.request('POST', `/v1/runs/${run.body.id}/proxy-token`);
  const token = minted.body.token as string;
  const from = log.lines.length;
  const res = await fetch(`${api.url}/proxy/t/${token}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-provider', 'x-request-id': 'call-1' },
    body: chat,
  });
  await res.arrayBuffer();
  expect(res.status).toBe(200);
  // The call's line is written once its step is recorded, after the answer.
  await expect.poll(() => lines(log, from).some((l) => l.msg === 'proxied call')).toBe(true);
  return { token, runId: run.body.id as string, lines: lines(log, from) };
}

const lines = (log: CapturedLog, from: number): Line[] => log.lines.slice(from).map((l) => JSON.parse(l) as Line);
const ofRequest = (all: Line[], reqId: string) => all.filter((l) => l.reqId === reqId);

describe('the request log at info', () => {
  let api: ProxyTestApi;
  let log: CapturedLog;
  beforeAll(async () => ({ api, log } = await started('info')));

  it('when a call is proxied, then it writes one line with user, run, model, decision, tokens, cost and time', async () => {
    const { token, runId, lines: written } = await proxiedCall(api, log);
    const call = ofRequest(written, 'call-1');
    expect(call).toHaveLength(1);
    expect(call[0]).toMatchObject({
      level: 30,
      msg: 'proxied call',
      user: 'agent-7',
      run: runId,
      model: 'gpt-4o-mini',
      decision: 'ALLOWED',
      status: 'COMPLETED',
    });
    expect(call[0]!.promptTokens).toBeGreaterThan(0);
    expect(call[0]!.completionTokens).toBeGreaterThan(0);
    expect(typeof call[0]!.costUsd).toBe('number');
    expect(typeof call[0]!.ms).toBe('number');
    expect(JSON.stringify(written)).not.toContain(token.slice(token.indexOf('_') + 1));
  });

  it('when an API request is answered, then it writes one line with its route, user, status and time', async () => {
    const from = log.lines.length;
    const res = await fetch(`${api.url}/v1/runs?limit=1`, {
      headers: { authorization: `Bearer ${api.apiKey}`, 'x-request-id': 'api-1' },
    });
    await res.arrayBuffer();
    expect(res.status).toBe(200);
    await expect.poll(() => ofRequest(lines(log, from), 'api-1').length).toBeGreaterThan(0);
    const line = ofRequest(lines(log, from), 'api-1');
    expect(line).toEqual([
      expect.objectContaining({ level: 30, msg: 'request', method: 'GET', url: '/v1/runs?limit=1', status: 200 }),
    ]);
    expect(typeof line[0]!.user).toBe('string');
    expect(JSON.stringify(line)).not.toContain(api.apiKey);
  });
});

describe('the request log at debug', () => {
  it('when a call is proxied, then the detail lines are there too', async () => {
    const { api, log } = await started('debug');
    const { lines: written } = await proxiedCall(api, log);
    const messages = ofRequest(written, 'call-1').map((l) => l.msg);
    expect(messages).toContain('incoming request');
    expect(messages).toContain('request completed');
    expect(messages.filter((m) => m === 'proxied call')).toHaveLength(1);
  });
});
