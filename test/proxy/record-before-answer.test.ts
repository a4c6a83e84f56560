/**
 * Issue #35: a proxied call is forwarded while its step's record commits, and no byte of its
 * answer is released before that record is durable. A test transaction holds the lock the record
 * needs, so the commit waits while the upstream answers at once; the record's failure (the run
 * ended meanwhile, the database connection lost) aborts the upstream request and answers as a
 * refusal before forwarding did.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { request, type Dispatcher } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type Backend, type TestApi } from '../support/harness.js';

/** An OpenAI-shaped upstream that answers after `x-test-delay-ms` and notes every request it saw cut short. */
interface WatchedUpstream {
  url: string;
  /** Bodies of the requests received, in order. */
  received: string[];
  /** Bodies of the requests whose client went away before the answer was sent. */
  aborted: string[];
  close(): Promise<void>;
}

async function startWatchedUpstream(): Promise<WatchedUpstream> {
  const received: string[] = [];
  const aborted: string[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      received.push(body);
      let answered = false;
      res.on('close', () => {
        if (!answered) aborted.push(body);
      });
      const stream = (JSON.parse(body) as { stream?: boolean }).stream === true;
      setTimeout(
        () => {
          if (res.destroyed) return;
          answered = true;
          const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 };
          if (stream) {
            res.writeHead(200, { 'content-type': 'text/event-stream' });
            const delta = { choices: [{ index: 0, delta: { content: 'hi' } }] };
            res.write(`data: ${JSON.stringify(delta)}\n\n`);
            res.write(`data: ${JSON.stringify({ choices: [], usage })}\n\n`);
            res.end('data: [DONE]\n\n');
          } else {
            res.writeHead(200, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ id: 'chatcmpl-watched', choices: [{ message: { content: 'hi' } }], usage }));
          }
        },
        Number(req.headers['x-test-delay-ms'] ?? 0),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    aborted,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const until = async (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 5_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
};

describe.each<Backend>(['postgres+redis', 'postgres+sql'])('a call recorded before its answer (%s)', (backend) => {
  let upstream: WatchedUpstream;
  let api: TestApi;
  /** A connection of the test's own: the transaction that holds the record's lock. */
  let holder: pg.Client;
  let calls = 0;
  /** Every answer asked for: read to the end before the app closes, so no connection stays busy. */
  const answers: Promise<Dispatcher.ResponseData>[] = [];

  beforeAll(async () => {
    upstream = await startWatchedUpstream();
    api = await startTestApi(backend, { proxy: { upstream: upstream.url } });
    holder = new pg.Client({ connectionString: api.stores.databaseUrl! });
    await holder.connect();
  });
  afterAll(async () => {
    await Promise.allSettled(answers.map((answer) => answer.then((res) => res.body.dump())));
    await holder?.end();
    await api?.close();
    await upstream?.close();
  });

  const startRun = async (): Promise<string> => {
    const res = await api.request('POST', '/v1/runs', { user_id: 'held-user' });
    expect(res.body.status).toBe('RUNNING');
    return res.body.id as string;
  };

  /** A chat completion through the proxy, into `runId` (null: a run of its own); its body names it. */
  const call = (runId: string | null, options: { stream?: boolean; upstreamDelayMs?: number; key?: string } = {}) => {
    const tag = `call-${++calls}`;
    const path = runId === null ? '/proxy/openai/chat/completions' : `/proxy/runs/${runId}/openai/chat/completions`;
    const answer = request(`${api.url}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer sk-provider',
        'x-runguard-key': options.key ?? api.apiKey,
        'x-runguard-user-id': 'held-user',
        'x-test-delay-ms': String(options.upstreamDelayMs ?? 0),
      },
      body: JSON.stringify({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: tag }],
        ...(options.stream ? { stream: true } : {}),
      }),
    });
    answers.push(answer);
    let released = false;
    void answer.then(
      () => (released = true),
      () => (released = true),
    );
    return { tag, answer, released: () => released };
  };

  const stepsOf = async (runId: string) =>
    (await holder.query<{ n: number }>('SELECT count(*)::int AS n FROM steps WHERE run_id = $1', [runId])).rows[0]!.n;
  const upstreamSaw = (tag: string) => upstream.received.some((body) => body.includes(tag));
  const errorOf = async (answer: Dispatcher.ResponseData) =>
    ((await answer.body.json()) as { error: { code: string } }).error.code;

  for (const stream of [false, true]) {
    it(`when the record's commit waits on a lock, then the call is forwarded but its ${stream ? 'stream' : 'answer'} is held until the record commits`, async () => {
      const runId = await startRun();
      await holder.query('BEGIN');
      try {
        await holder.query('SELECT id FROM runs WHERE id = $1 FOR UPDATE', [runId]);
        const pending = call(runId, { stream });
        // The upstream is called while the record waits (before #35 it waited for the record).
        await until('the upstream has the call', () => upstreamSaw(pending.tag));
        // The upstream answered at once; its answer stays with the daemon while the record waits.
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(pending.released()).toBe(false);
        expect(await stepsOf(runId)).toBe(0);
        await holder.query('COMMIT');
        const answer = await pending.answer;
        expect(answer.statusCode).toBe(200);
        const stepId = answer.headers['x-runguard-step-id'];
        const text = await answer.body.text();
        expect(text).toContain(stream ? 'data: [DONE]' : 'chatcmpl-watched');
        const step = await holder.query('SELECT run_id FROM steps WHERE id = $1', [stepId]);
        expect(step.rows).toEqual([{ run_id: runId }]);
      } finally {
        await holder.query('ROLLBACK').catch(() => {});
      }
    });
  }

  /** A run-less call while every step insert waits on the test's lock: its run and step commit in one statement. */
  async function runOfItsOwnWhileInsertsWait(key: string, check: (pending: ReturnType<typeof call>) => Promise<void>) {
    await holder.query('BEGIN');
    try {
      await holder.query('LOCK TABLE steps IN SHARE MODE');
      const pending = call(null, { key });
      await check(pending);
      await holder.query('COMMIT');
      const answer = await pending.answer;
      expect(answer.statusCode).toBe(200);
      expect(await answer.body.text()).toContain('chatcmpl-watched');
      const recorded = await holder.query('SELECT status FROM steps WHERE id = $1', [
        answer.headers['x-runguard-step-id'],
      ]);
      expect(recorded.rows).toHaveLength(1);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
    }
  }

  it("when a run of the call's own cannot commit yet, then the call is forwarded and its answer held until it does", async () => {
    // No run limit (enterprise): a start takes no admission lock, and its decision holds before it commits.
    const unlimited = await api.newWorkspace('enterprise');
    await runOfItsOwnWhileInsertsWait(unlimited.apiKey, async (pending) => {
      await until('the upstream has the call', () => upstreamSaw(pending.tag));
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(pending.released()).toBe(false);
    });
  });

  it("when the workspace has a run limit, then a run of the call's own is recorded before the call is forwarded", async () => {
    // Its admission holds only under the workspace's lock, until the start commits (scale: limits).
    await runOfItsOwnWhileInsertsWait(api.apiKey, async (pending) => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(upstreamSaw(pending.tag)).toBe(false);
      expect(pending.released()).toBe(false);
    });
  });

  it('when the run ends before the record commits, then the upstream request is aborted and the call is refused as before', async () => {
    const runId = await startRun();
    await holder.query('BEGIN');
    try {
      await holder.query('SELECT id FROM runs WHERE id = $1 FOR UPDATE', [runId]);
      // Another daemon ends the run; its end commits while this call's record waits for the run.
      await holder.query(`UPDATE runs SET status = 'COMPLETED', ended_at = now() WHERE id = $1`, [runId]);
      const pending = call(runId, { upstreamDelayMs: 5_000 });
      await until('the upstream has the call', () => upstreamSaw(pending.tag));
      await holder.query('COMMIT');
      const answer = await pending.answer;
      expect(answer.statusCode).toBe(403);
      expect(await errorOf(answer)).toBe('RUN_NOT_RUNNING');
      await until('the upstream saw the call aborted', () =>
        upstream.aborted.some((body) => body.includes(pending.tag)),
      );
      expect(await stepsOf(runId)).toBe(0);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
    }
  });

  it('when the record cannot be committed, then the upstream request is aborted and the call answers 503', async () => {
    const runId = await startRun();
    await holder.query('BEGIN');
    try {
      await holder.query('SELECT id FROM runs WHERE id = $1 FOR UPDATE', [runId]);
      const pending = call(runId, { upstreamDelayMs: 5_000 });
      await until('the upstream has the call', () => upstreamSaw(pending.tag));
      // The daemon's connection waiting to write the record is lost.
      const waiting = async () =>
        (
          await holder.query(
            `SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`,
          )
        ).rows.length > 0;
      await until("the record's statement is waiting, then ended", waiting);
      const answer = await pending.answer;
      expect(answer.statusCode).toBe(503);
      expect(await errorOf(answer)).toBe('SERVICE_UNAVAILABLE');
      await until('the upstream saw the call aborted', () =>
        upstream.aborted.some((body) => body.includes(pending.tag)),
      );
      await holder.query('ROLLBACK');
      expect(await stepsOf(runId)).toBe(0);
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
    }
  });
});
