/**
 * The relay's flow control, between real sockets: a client that does not read holds the upstream
 * back (nothing piles up in the daemon), and a client that leaves before the answer cancels the
 * upstream request. The upstream here is a plain node:http server that says what it saw.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../support/harness.js';

/** 64 MiB: far more than the kernel's socket buffers on both hops can hold. */
const TOTAL = 64 * 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 'x');

/** What the upstream saw of its last request. */
const seen = { received: false, written: 0, finished: false, closedEarly: false };
let upstream: Server;
let api: TestApi;

beforeAll(async () => {
  upstream = createServer((req: IncomingMessage, res) => {
    Object.assign(seen, { received: true, written: 0, finished: false, closedEarly: false });
    req.resume();
    res.on('close', () => {
      if (!res.writableFinished) seen.closedEarly = true;
    });
    if (req.url?.endsWith('/slow')) {
      // Answers only after 5 s: the client is meant to leave before.
      setTimeout(() => res.writableEnded || res.destroyed || res.end('{}'), 5_000).unref();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': TOTAL });
    const pump = () => {
      while (seen.written < TOTAL) {
        seen.written += CHUNK.length;
        if (!res.write(CHUNK)) return void res.once('drain', pump);
      }
      res.end(() => (seen.finished = true));
    };
    pump();
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  api = await startTestApi('postgres+redis', {
    proxy: { upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` },
  });
});
afterAll(async () => {
  await api?.close();
  await new Promise((resolve) => upstream?.close(resolve));
});

async function startRun(): Promise<string> {
  const res = await api.request('POST', '/v1/runs', { user_id: 'relay' });
  expect(res.body.status).toBe('RUNNING');
  return res.body.id;
}

/** The run's only step, once the proxy has recorded its result. */
async function recordedStep(runId: string): Promise<any> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const step = (await api.request('GET', `/v1/runs/${runId}`)).body.steps[0];
    if (step && step.status !== 'ALLOWED') return step;
    if (Date.now() > deadline) throw new Error(`the step of run ${runId} was not recorded: ${JSON.stringify(step)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const until = async (condition: () => boolean, what: string) => {
  const deadline = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within 5 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

function post(runId: string, path: string) {
  const { port } = new URL(api.url);
  return httpRequest({
    host: '127.0.0.1',
    port,
    method: 'POST',
    path: `/proxy/runs/${runId}/openai/v1/${path}`,
    headers: { 'content-type': 'application/json', 'x-runguard-key': api.apiKey, authorization: 'Bearer sk-relay' },
  });
}

describe('relay flow control', () => {
  it('when the client stops reading, then the upstream is held back, and every byte arrives once it reads again', async () => {
    const runId = await startRun();
    const req = post(runId, 'files/big');
    const response = new Promise<IncomingMessage>((resolve, reject) => req.on('response', resolve).on('error', reject));
    req.end(JSON.stringify({ model: 'm' }));
    const res = await response;
    res.pause();
    // Long enough for a daemon that buffered to take it all in: loopback moves 64 MiB in well
    // under a second. Held back, the upstream stops at what the socket buffers between hold.
    await new Promise((r) => setTimeout(r, 1_000));
    expect(seen.finished).toBe(false);
    expect(seen.written).toBeLessThan(TOTAL);

    let received = 0;
    res.on('data', (chunk: Buffer) => (received += chunk.length));
    res.resume();
    await new Promise((resolve) => res.on('end', resolve));
    expect(received).toBe(TOTAL);
    expect(seen.finished).toBe(true);
    const step = await recordedStep(runId);
    expect(step.status).toBe('COMPLETED');
    expect(step.output_data).toMatchObject({ http_status: 200 });
  });

  it('when the client leaves before the upstream answers, then the upstream request is cancelled and the step is FAILED as CLIENT_ABORTED', async () => {
    const runId = await startRun();
    seen.received = false;
    const req = post(runId, 'slow');
    req.on('error', () => {});
    req.end(JSON.stringify({ model: 'm' }));
    await until(() => seen.received, 'the upstream receiving the request');
    req.destroy();

    await until(() => seen.closedEarly, 'the upstream request being cancelled');
    const step = await recordedStep(runId);
    expect(step.status).toBe('FAILED');
    expect(step.output_data).toEqual({ error: 'CLIENT_ABORTED' });
  });

  it('when the client leaves while the app is closing, then its call is recorded before close resolves', async () => {
    const closing = await startTestApi('postgres+redis', {
      proxy: { upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` },
    });
    try {
      const started = await closing.request('POST', '/v1/runs', { user_id: 'shutdown' });
      const runId = started.body.id as string;
      seen.received = false;
      const req = httpRequest({
        host: '127.0.0.1',
        port: new URL(closing.url).port,
        method: 'POST',
        path: `/proxy/runs/${runId}/openai/v1/slow`,
        headers: {
          'content-type': 'application/json',
          'x-runguard-key': closing.apiKey,
          authorization: 'Bearer sk-relay',
        },
      });
      req.on('error', () => {});
      req.end(JSON.stringify({ model: 'm' }));
      await until(() => seen.received, 'the upstream receiving the request');
      const closed = closing.app.close();
      req.destroy();
      await closed;
      // The stores are still open: close() of the app alone has run.
      const { rows } = await closing.stores.db.query<{ status: string; output_data: unknown }>(
        'SELECT status, output_json AS output_data FROM steps WHERE run_id = $1',
        [runId],
      );
      expect(rows).toEqual([{ status: 'FAILED', output_data: { error: 'CLIENT_ABORTED' } }]);
    } finally {
      await closing.close();
    }
  });
});
