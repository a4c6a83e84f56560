import { describe, expect, it } from 'vitest';
import { adapterFor } from '../../../src/proxy/providers/index.js';
import { NO_TOKENS } from '../../../src/proxy/providers/types.js';
import { bytes, pieces, sse, track } from '../../proxy/chunks.js';

const anthropic = adapterFor('anthropic');

describe('anthropic adapter: inspectRequest', () => {
  it('when a messages request arrives, then it reads model and stream and never rewrites', () => {
    const body = {
      model: 'claude-sonnet-4-5',
      max_tokens: 1024,
      stream: true,
      messages: [{ role: 'user', content: 'Hello' }],
    };
    expect(anthropic.inspectRequest('/v1/messages', body)).toEqual({ model: 'claude-sonnet-4-5', stream: true });
    expect(anthropic.inspectRequest('/v1/messages', 'not json')).toEqual({ model: null, stream: false });
  });
});

describe('anthropic adapter: usage', () => {
  // As documented for POST /v1/messages.
  const message = {
    id: 'msg_013Zva2CMHLNnXjNJJKqJ2EF',
    type: 'message',
    role: 'assistant',
    model: 'claude-sonnet-4-5',
    content: [{ type: 'text', text: 'Hi! My name is Claude.' }],
    stop_reason: 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: 2095, output_tokens: 503, cache_creation_input_tokens: 100, cache_read_input_tokens: 1800 },
  };

  it('when the body is JSON, then prompt tokens add cache writes and reads to input', () => {
    const tracker = anthropic.usageTracker('/v1/messages', 'application/json');
    expect(track(tracker, pieces(JSON.stringify(message), 16))).toEqual({
      promptTokens: 2095 + 100 + 1800,
      completionTokens: 503,
      cacheReadTokens: 1800,
      cacheWriteTokens: 100,
      reasoningTokens: null,
    });
  });

  it('when the cache fields are absent, then prompt tokens are the input and cached tokens unknown', () => {
    const body = { ...message, usage: { input_tokens: 12, output_tokens: 6 } };
    expect(track(anthropic.usageTracker('/v1/messages', 'application/json'), [bytes(JSON.stringify(body))])).toEqual({
      promptTokens: 12,
      completionTokens: 6,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  // The streaming example of Anthropic's documentation.
  const stream = sse([
    [
      'message_start',
      {
        type: 'message_start',
        message: {
          id: 'msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY',
          type: 'message',
          role: 'assistant',
          content: [],
          model: 'claude-opus-4-6',
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 25, output_tokens: 1 },
        },
      },
    ],
    ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
    ['ping', { type: 'ping' }],
    ['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hello' } }],
    [
      'content_block_delta',
      { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: '! ¿Qué tal? 🤖' } },
    ],
    ['content_block_stop', { type: 'content_block_stop', index: 0 }],
    [
      'message_delta',
      { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 15 } },
    ],
    ['message_stop', { type: 'message_stop' }],
  ]);

  it('when the body is an SSE stream cut byte by byte, then input comes from message_start and output from message_delta', () => {
    const tracker = anthropic.usageTracker('/v1/messages', 'text/event-stream');
    expect(track(tracker, pieces(stream, 1))).toEqual({
      promptTokens: 25,
      completionTokens: 15,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  it('when the stream is cut before message_delta, then usage is what message_start said', () => {
    const tracker = anthropic.usageTracker('/v1/messages', 'text/event-stream');
    tracker.push(bytes(stream.slice(0, stream.indexOf('event: message_delta'))));
    expect(tracker.current()).toEqual({
      promptTokens: 25,
      completionTokens: 1,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
    expect(tracker.end()).toEqual({
      promptTokens: 25,
      completionTokens: 1,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  it('when several message_delta events arrive, then the latest cumulative counts win, input ones included', () => {
    const deltas = sse([
      [
        'message_start',
        {
          type: 'message_start',
          message: {
            usage: { input_tokens: 10, cache_read_input_tokens: 90, cache_creation_input_tokens: 0, output_tokens: 1 },
          },
        },
      ],
      ['message_delta', { type: 'message_delta', delta: {}, usage: { output_tokens: 40 } }],
      [
        'message_delta',
        {
          type: 'message_delta',
          delta: { stop_reason: 'tool_use' },
          usage: { input_tokens: 12, cache_read_input_tokens: 90, output_tokens: 70 },
        },
      ],
    ]);
    expect(track(anthropic.usageTracker('/v1/messages', 'text/event-stream'), [bytes(deltas)])).toEqual({
      promptTokens: 12 + 90,
      completionTokens: 70,
      cacheReadTokens: 90,
      cacheWriteTokens: 0,
      reasoningTokens: null,
    });
  });

  it('when an error event arrives mid-stream, then the usage seen so far stays', () => {
    const broken = sse([
      ['message_start', { type: 'message_start', message: { usage: { input_tokens: 7, output_tokens: 1 } } }],
      ['error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }],
    ]);
    expect(track(anthropic.usageTracker('/v1/messages', 'text/event-stream'), [bytes(broken)])).toEqual({
      promptTokens: 7,
      completionTokens: 1,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  it.each(['/v1/messages/count_tokens', '/v1/messages/batches', '/v1/models'])(
    'when %s answers, then it counts no usage',
    (path) => {
      const body = { input_tokens: 2095, usage: { input_tokens: 1, output_tokens: 1 } };
      expect(track(anthropic.usageTracker(path, 'application/json'), [bytes(JSON.stringify(body))])).toEqual(NO_TOKENS);
    },
  );
});

describe('anthropic adapter: error bodies', () => {
  it('when a guardrail denies, then the body is an Anthropic permission_error carrying the reason', () => {
    expect(anthropic.denialBody('KILL_SWITCH', 'Workspace is paused')).toEqual({
      type: 'error',
      error: {
        type: 'permission_error',
        message: 'Workspace is paused (KILL_SWITCH)',
        details: { error_code: 'KILL_SWITCH' },
      },
    });
  });

  it.each([
    [502, 'api_error'],
    [504, 'timeout_error'],
    [529, 'overloaded_error'],
    [401, 'authentication_error'],
    [400, 'invalid_request_error'],
  ])('when the proxy answers %i itself, then the error type is %s', (status, type) => {
    expect(anthropic.errorBody(status, 'Upstream unreachable', 'UPSTREAM_UNREACHABLE')).toEqual({
      type: 'error',
      error: { type, message: 'Upstream unreachable', details: { error_code: 'UPSTREAM_UNREACHABLE' } },
    });
  });
});

describe('anthropic adapter: thinking tokens', () => {
  it('when a stream reports thinking tokens in message_delta, then they are the reasoning part of the output', () => {
    const stream = sse([
      [
        'message_start',
        {
          type: 'message_start',
          message: {
            usage: {
              input_tokens: 10,
              cache_read_input_tokens: 4000,
              cache_creation_input_tokens: 1000,
              output_tokens: 1,
            },
          },
        },
      ],
      [
        'message_delta',
        {
          type: 'message_delta',
          delta: { stop_reason: 'end_turn' },
          usage: { output_tokens: 700, output_tokens_details: { thinking_tokens: 512 } },
        },
      ],
    ]);
    expect(track(anthropic.usageTracker('/v1/messages', 'text/event-stream'), pieces(stream, 5))).toEqual({
      promptTokens: 10 + 4000 + 1000,
      completionTokens: 700,
      cacheReadTokens: 4000,
      cacheWriteTokens: 1000,
      reasoningTokens: 512,
    });
  });
});
