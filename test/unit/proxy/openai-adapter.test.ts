import { describe, expect, it } from 'vitest';
import { adapterFor } from '../../../src/proxy/providers/index.js';
import { NO_TOKENS, type TokenFields } from '../../../src/proxy/providers/types.js';
import { bytes, pieces, sse, track } from '../../proxy/chunks.js';

const openai = adapterFor('openai');

describe('openai adapter: inspectRequest', () => {
  const chat = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }] };

  it('when a chat request is not streamed, then it reads the model and sends the body untouched', () => {
    expect(openai.inspectRequest('/v1/chat/completions', chat)).toEqual({ model: 'gpt-4o-mini', stream: false });
  });

  it.each(['/v1/chat/completions', '/chat/completions', '/v1/chat/completions/?x=1', '/v1/completions'])(
    'when a stream on %s does not ask for usage, then include_usage is added',
    (path) => {
      const body = { ...chat, stream: true };
      const inspected = openai.inspectRequest(path, body);
      expect(inspected).toEqual({
        model: 'gpt-4o-mini',
        stream: true,
        rewrittenBody: { ...chat, stream: true, stream_options: { include_usage: true } },
      });
      expect(body).not.toHaveProperty('stream_options'); // the client's object is not mutated
    },
  );

  it('when stream_options holds other settings, then they are kept next to include_usage', () => {
    const body = { ...chat, stream: true, stream_options: { include_obfuscation: false } };
    expect(openai.inspectRequest('/v1/chat/completions', body).rewrittenBody).toEqual({
      ...body,
      stream_options: { include_obfuscation: false, include_usage: true },
    });
  });

  it('when the client set include_usage to true, then the body is sent untouched', () => {
    const body = { ...chat, stream: true, stream_options: { include_usage: true } };
    expect(openai.inspectRequest('/v1/chat/completions', body)).toEqual({ model: 'gpt-4o-mini', stream: true });
  });

  it("when the client set include_usage to false, then it is asked for anyway: a request option must not hide a call's cost", () => {
    const body = { ...chat, stream: true, stream_options: { include_usage: false, include_obfuscation: false } };
    expect(openai.inspectRequest('/v1/chat/completions', body).rewrittenBody).toEqual({
      ...body,
      stream_options: { include_usage: true, include_obfuscation: false },
    });
  });

  it('when include_usage is not a boolean, then the body is left for the upstream to reject', () => {
    const body = { ...chat, stream: true, stream_options: { include_usage: 'yes' } };
    expect(openai.inspectRequest('/v1/chat/completions', body)).toEqual({ model: 'gpt-4o-mini', stream: true });
  });

  it('when a Responses or embeddings request streams, then nothing is rewritten (usage comes anyway)', () => {
    const inspected = openai.inspectRequest('/v1/responses', { model: 'gpt-4.1', input: 'Hi', stream: true });
    expect(inspected).toEqual({ model: 'gpt-4.1', stream: true });
  });

  it('when an Azure-style path names the deployment and the body no model, then the deployment is the model', () => {
    const path = '/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21';
    expect(openai.inspectRequest(path, { messages: [] }).model).toBe('my-gpt4o');
  });

  it('when there is no JSON object body, then there is no model and no stream', () => {
    expect(openai.inspectRequest('/v1/models', undefined)).toEqual({ model: null, stream: false });
    expect(openai.inspectRequest('/v1/chat/completions', [1, 2])).toEqual({ model: null, stream: false });
  });
});

describe('openai adapter: usage of chat completions', () => {
  // As documented for POST /v1/chat/completions.
  const completion = {
    id: 'chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG',
    object: 'chat.completion',
    created: 1741570283,
    model: 'gpt-4o-2024-08-06',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: 'The image shows a wooden boardwalk…', refusal: null, annotations: [] },
        logprobs: null,
        finish_reason: 'stop',
      },
    ],
    usage: {
      prompt_tokens: 1117,
      completion_tokens: 46,
      total_tokens: 1163,
      prompt_tokens_details: { cached_tokens: 1024, audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: 0,
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    },
    service_tier: 'default',
    system_fingerprint: 'fp_fc9f1d7035',
  };

  it('when the body is JSON, then usage is read at the end, cached tokens included', () => {
    const tracker = openai.usageTracker('/v1/chat/completions', 'application/json');
    const text = JSON.stringify(completion);
    for (const chunk of pieces(text, 50)) tracker.push(chunk);
    expect(tracker.current()).toEqual(NO_TOKENS); // half a JSON body says nothing
    expect(tracker.end()).toEqual({
      promptTokens: 1117,
      completionTokens: 46,
      cacheReadTokens: 1024,
      cacheWriteTokens: null,
      reasoningTokens: 0,
    });
  });

  it('when an OpenAI-compatible server omits the details, then cached tokens are null', () => {
    const body = { ...completion, usage: { prompt_tokens: 9, completion_tokens: 12, total_tokens: 21 } };
    const tracker = openai.usageTracker('/chat/completions', 'application/json; charset=utf-8');
    expect(track(tracker, [bytes(JSON.stringify(body))])).toEqual({
      promptTokens: 9,
      completionTokens: 12,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  const chunk = (delta: object, finish: string | null): object => ({
    id: 'chatcmpl-123',
    object: 'chat.completion.chunk',
    created: 1694268190,
    model: 'gpt-4o-mini',
    system_fingerprint: 'fp_44709d6fcb',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    usage: null,
  });
  const stream = sse([
    [null, chunk({ role: 'assistant', content: '' }, null)],
    [null, chunk({ content: 'Hello' }, null)],
    [null, chunk({ content: ' wörld 🌍' }, null)],
    [null, chunk({}, 'stop')],
    [
      null,
      {
        id: 'chatcmpl-123',
        object: 'chat.completion.chunk',
        created: 1694268190,
        model: 'gpt-4o-mini',
        system_fingerprint: 'fp_44709d6fcb',
        choices: [],
        usage: {
          prompt_tokens: 19,
          completion_tokens: 10,
          total_tokens: 29,
          prompt_tokens_details: { cached_tokens: 0 },
        },
      },
    ],
    [null, '[DONE]'],
  ]);

  it('when the body is an SSE stream cut byte by byte, then usage comes from the final usage chunk', () => {
    const tracker = openai.usageTracker('/v1/chat/completions', 'text/event-stream; charset=utf-8');
    expect(track(tracker, pieces(stream, 1))).toEqual({
      promptTokens: 19,
      completionTokens: 10,
      cacheReadTokens: 0,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  it('when the stream is cut before the usage chunk, then usage is unknown; after it, known', () => {
    const cut = stream.indexOf('"choices":[]');
    const early = openai.usageTracker('/v1/chat/completions', 'text/event-stream');
    early.push(bytes(stream.slice(0, cut)));
    expect(early.current()).toEqual(NO_TOKENS);
    expect(early.end()).toEqual(NO_TOKENS);

    const late = openai.usageTracker('/v1/chat/completions', 'text/event-stream');
    late.push(bytes(stream.slice(0, stream.indexOf('[DONE]'))));
    expect(late.current()).toEqual({
      promptTokens: 19,
      completionTokens: 10,
      cacheReadTokens: 0,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  it('when the upstream answers an error body, then there is no usage', () => {
    const error = {
      error: { message: 'Rate limit reached', type: 'requests', param: null, code: 'rate_limit_exceeded' },
    };
    const tracker = openai.usageTracker('/v1/chat/completions', 'application/json');
    expect(track(tracker, [bytes(JSON.stringify(error))])).toEqual(NO_TOKENS);
  });
});

describe('openai adapter: usage of other endpoints', () => {
  const responseUsage = {
    input_tokens: 36,
    input_tokens_details: { cached_tokens: 12 },
    output_tokens: 87,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 123,
  };
  const expected: TokenFields = {
    promptTokens: 36,
    completionTokens: 87,
    cacheReadTokens: 12,
    cacheWriteTokens: null,
    reasoningTokens: 0,
  };

  it('when a Responses body is JSON, then usage is input and output tokens', () => {
    const body = {
      id: 'resp_67ccd3a9da748190',
      object: 'response',
      status: 'completed',
      output: [],
      usage: responseUsage,
    };
    expect(track(openai.usageTracker('/v1/responses', 'application/json'), [bytes(JSON.stringify(body))])).toEqual(
      expected,
    );
  });

  const inProgress = { id: 'resp_1', object: 'response', status: 'in_progress', output: [], usage: null };
  const events = (last: string): string =>
    sse([
      ['response.created', { type: 'response.created', sequence_number: 0, response: inProgress }],
      ['response.in_progress', { type: 'response.in_progress', sequence_number: 1, response: inProgress }],
      [
        'response.output_text.delta',
        {
          type: 'response.output_text.delta',
          sequence_number: 2,
          item_id: 'msg_1',
          output_index: 0,
          content_index: 0,
          delta: 'Hi "usage"',
        },
      ],
      [
        last,
        { type: last, sequence_number: 3, response: { ...inProgress, status: last.slice(9), usage: responseUsage } },
      ],
    ]);

  it.each(['response.completed', 'response.incomplete', 'response.failed'])(
    'when a Responses stream ends with %s, then usage is read from it',
    (last) => {
      expect(track(openai.usageTracker('/v1/responses', 'text/event-stream'), pieces(events(last), 13))).toEqual(
        expected,
      );
    },
  );

  it('when a Responses stream is cut before it completes, then usage is unknown', () => {
    const stream = events('response.completed');
    const tracker = openai.usageTracker('/v1/responses', 'text/event-stream');
    tracker.push(bytes(stream.slice(0, stream.indexOf('event: response.completed'))));
    expect(tracker.end()).toEqual(NO_TOKENS);
  });

  it('when embeddings answer, then prompt tokens are counted and completion is zero', () => {
    const body = {
      object: 'list',
      data: [{ object: 'embedding', embedding: [0.0023064255, -0.009327292], index: 0 }],
      model: 'text-embedding-3-small',
      usage: { prompt_tokens: 8, total_tokens: 8 },
    };
    expect(track(openai.usageTracker('/v1/embeddings', 'application/json'), [bytes(JSON.stringify(body))])).toEqual({
      promptTokens: 8,
      completionTokens: 0,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  it('when legacy completions answer, then usage reads like chat', () => {
    const body = {
      id: 'cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7',
      object: 'text_completion',
      choices: [{ text: 'This is a test.', index: 0, logprobs: null, finish_reason: 'length' }],
      usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
    };
    expect(track(openai.usageTracker('/v1/completions', 'application/json'), [bytes(JSON.stringify(body))])).toEqual({
      promptTokens: 5,
      completionTokens: 7,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  it.each(['/v1/models', '/v1/responses/resp_123', '/v1/files'])('when %s answers, then it counts no usage', (path) => {
    const body = { usage: { prompt_tokens: 5, completion_tokens: 7, input_tokens: 5, output_tokens: 7 } };
    expect(track(openai.usageTracker(path, 'application/json'), [bytes(JSON.stringify(body))])).toEqual(NO_TOKENS);
  });
});

describe('openai adapter: error bodies', () => {
  it('when a guardrail denies, then the body is an OpenAI error carrying the reason as code', () => {
    expect(openai.denialBody('BUDGET_EXCEEDED', 'Run budget of $5.00 reached')).toEqual({
      error: { type: 'guardrail_denied', code: 'BUDGET_EXCEEDED', message: 'Run budget of $5.00 reached', param: null },
    });
  });

  it('when the proxy fails itself, then the body is an OpenAI error typed by status', () => {
    expect(openai.errorBody(502, 'Upstream unreachable', 'UPSTREAM_UNREACHABLE')).toEqual({
      error: { type: 'server_error', code: 'UPSTREAM_UNREACHABLE', message: 'Upstream unreachable', param: null },
    });
    expect(openai.errorBody(401, 'Missing key', 'UNAUTHORIZED')).toMatchObject({
      error: { type: 'invalid_request_error' },
    });
  });
});

describe('openai adapter: cache writes and reasoning', () => {
  const usage = {
    prompt_tokens: 5000,
    completion_tokens: 900,
    total_tokens: 5900,
    prompt_tokens_details: { cached_tokens: 3000, cache_write_tokens: 1500, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 640, audio_tokens: 0 },
  };

  it('when a chat answer reports cache writes and reasoning, then they are read as parts of prompt and completion', () => {
    const body = { id: 'chatcmpl-1', object: 'chat.completion', choices: [], usage };
    expect(
      track(openai.usageTracker('/v1/chat/completions', 'application/json'), [bytes(JSON.stringify(body))]),
    ).toEqual({
      promptTokens: 5000,
      completionTokens: 900,
      cacheReadTokens: 3000,
      cacheWriteTokens: 1500,
      reasoningTokens: 640,
    });
  });

  it('when a streamed Responses call completes with cache writes and reasoning, then they are read from response.completed', () => {
    const responseUsage = {
      input_tokens: 5000,
      input_tokens_details: { cached_tokens: 3000, cache_write_tokens: 1500 },
      output_tokens: 900,
      output_tokens_details: { reasoning_tokens: 640 },
      total_tokens: 5900,
    };
    const stream = sse([
      [
        'response.completed',
        { type: 'response.completed', response: { id: 'resp_1', status: 'completed', usage: responseUsage } },
      ],
    ]);
    expect(track(openai.usageTracker('/v1/responses', 'text/event-stream'), pieces(stream, 7))).toEqual({
      promptTokens: 5000,
      completionTokens: 900,
      cacheReadTokens: 3000,
      cacheWriteTokens: 1500,
      reasoningTokens: 640,
    });
  });
});
