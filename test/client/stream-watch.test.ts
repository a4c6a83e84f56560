/**
 * Streams watched by the SDK, against the contract's stand-in server: edge cases that need a
 * fault (a failed report) or a stream shape no provider SDK makes on demand.
 */
import { EventEmitter } from 'node:events';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { extractors, GuardClient, ValidationError } from '../../clients/typescript/src/index.js';
import { fakeRunguardAndClient, FakeRunguard } from './fake-server.js';

/** An event-emitting runner shaped like the SDKs' (on, done, ended, errored, aborted). */
class FakeRunner extends EventEmitter {
  ended = false;
  errored = false;
  aborted = false;
  done(): Promise<void> {
    return new Promise((resolve) => this.once('end', resolve));
  }
  finish(events: unknown[]): void {
    setImmediate(() => {
      for (const event of events) this.emit('streamEvent', event);
      this.ended = true;
      this.emit('end');
    });
  }
}

const anthropicEvents = [
  { type: 'message_start', message: { usage: { input_tokens: 10, cache_read_input_tokens: 90, output_tokens: 1 } } },
  { type: 'message_delta', delta: {}, usage: { output_tokens: 40 } },
];

let server: FakeRunguard;
let guard: GuardClient;
let close: () => Promise<void>;

beforeEach(async () => {
  ({ server, guard, close } = await fakeRunguardAndClient({ maxRetries: 0 }));
});
afterEach(() => close());

describe('watched streams', () => {
  it('when a runner ends after the callback returned, then the run ends only once the step is reported', async () => {
    await guard.run('u', async (run) => {
      const runner = await run.modelCall(() => new FakeRunner(), {
        model: 'claude-x',
        tokenExtractor: extractors.anthropic,
      });
      runner.finish(anthropicEvents);
    });
    const methods = server.requests.map((r) => r.method);
    expect(methods.slice(-2)).toEqual(['PATCH', 'POST']); // the step's report, then the run's end
    expect(server.requestsTo('PATCH', /\/steps\//)[0]?.body).toEqual({
      status: 'COMPLETED',
      duration_ms: expect.any(Number),
      prompt_tokens: 100,
      completion_tokens: 40,
      cache_read_tokens: 90,
    });
  });

  it("when a runner's report fails where no caller awaits it, then guard.run throws it and ends the run FAILED", async () => {
    const failed = guard.run('u', async (run) => {
      const runner = await run.modelCall(() => new FakeRunner(), {
        model: 'claude-x',
        tokenExtractor: extractors.anthropic,
      });
      server.failNext(1, { kind: 'status', status: 422 });
      runner.finish(anthropicEvents);
      await runner.done();
    });
    await expect(failed).rejects.toBeInstanceOf(ValidationError);
    expect(server.onlyRun().status).toBe('FAILED');
  });

  it('when a custom extractor has no stream reader, then it is called with each chunk and its last answer counts', async () => {
    async function* chunks() {
      yield { tokens: [5, 1] };
      yield { tokens: [5, 7] };
      yield { other: true };
    }
    await guard.run('u', async (run) => {
      const stream = await run.modelCall(() => chunks(), { model: 'm', tokenExtractor: (c: any) => c.tokens });
      for await (const chunk of stream) void chunk;
    });
    expect(server.requestsTo('PATCH', /\/steps\//)[0]?.body).toMatchObject({
      status: 'COMPLETED',
      prompt_tokens: 5,
      completion_tokens: 7,
    });
  });

  it('when a stream reports cache tokens past its prompt, then the parts that do not add up are left out, not the report', async () => {
    async function* chunks() {
      yield { usage: { prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 50 } } };
    }
    await guard.run('u', async (run) => {
      for await (const chunk of await run.modelCall(() => chunks(), { model: 'm', tokenExtractor: extractors.openai }))
        void chunk;
    });
    expect(server.requestsTo('PATCH', /\/steps\//)[0]?.body).toEqual({
      status: 'COMPLETED',
      duration_ms: expect.any(Number),
      prompt_tokens: 10,
      completion_tokens: 2,
    });
  });
});
