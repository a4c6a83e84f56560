import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { extractors, GuardClient } from '../../../clients/typescript/src/index.js';
import { fakeRunguardAndClient, FakeRunguard } from '../../client/fake-server.js';
import { openaiChatCompletion } from '../../client/openai-shapes.js';

// Shapes as returned by the provider SDKs (openai 6.x, @anthropic-ai/sdk), trimmed of nothing that matters.
const chatCompletion = openaiChatCompletion('Hello! How can I help?', 19, 10);

const response = {
  id: 'resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b',
  object: 'response',
  created_at: 1741476542,
  status: 'completed',
  model: 'gpt-4.1-2025-04-14',
  output: [
    {
      type: 'message',
      id: 'msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b',
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: 'In a peaceful grove...', annotations: [] }],
    },
  ],
  usage: {
    input_tokens: 36,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: 87,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 123,
  },
};

const anthropicMessage = {
  id: 'msg_013Zva2CMHLNnXjNJJKqJ2EF',
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-20250514',
  content: [{ type: 'text', text: 'Hi! My name is Claude.' }],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: {
    input_tokens: 2095,
    output_tokens: 503,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    service_tier: 'standard',
  },
};

describe('extractors (pure)', () => {
  it('when given an OpenAI chat completion, then prompt and completion tokens are read', () => {
    expect(extractors.openaiChatCompletions(chatCompletion)).toEqual({
      promptTokens: 19,
      completionTokens: 10,
      cacheReadTokens: 0,
      cacheWriteTokens: null,
      reasoningTokens: 0,
    });
    expect(extractors.openai).toBe(extractors.openaiChatCompletions);
  });

  it('when given an OpenAI Responses object, then input and output tokens are read', () => {
    expect(extractors.openaiResponses(response)).toEqual({
      promptTokens: 36,
      completionTokens: 87,
      cacheReadTokens: 0,
      cacheWriteTokens: null,
      reasoningTokens: 0,
    });
  });

  it('when given an Anthropic message, then input and output tokens are read', () => {
    expect(extractors.anthropicMessages(anthropicMessage)).toEqual({
      promptTokens: 2095,
      completionTokens: 503,
      cacheReadTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: null,
    });
    expect(extractors.anthropic).toBe(extractors.anthropicMessages);
  });

  it('when an Anthropic message used the prompt cache, then its writes and reads are prompt tokens, and kept apart to be priced', () => {
    const cached = {
      ...anthropicMessage,
      usage: {
        ...anthropicMessage.usage,
        input_tokens: 12,
        cache_creation_input_tokens: 50_000,
        cache_read_input_tokens: 150_000,
        output_tokens_details: { thinking_tokens: 300 },
      },
    };
    expect(extractors.anthropicMessages(cached)).toEqual({
      promptTokens: 200_012,
      completionTokens: 503,
      cacheReadTokens: 150_000,
      cacheWriteTokens: 50_000,
      reasoningTokens: 300,
    });
    // Older responses carry no cache fields, or null ones.
    expect(
      extractors.anthropicMessages({ usage: { input_tokens: 7, output_tokens: 3, cache_read_input_tokens: null } }),
    ).toEqual({
      promptTokens: 7,
      completionTokens: 3,
      cacheReadTokens: null,
      cacheWriteTokens: null,
      reasoningTokens: null,
    });
  });

  it('when an OpenAI answer reports cache writes and reasoning, then they are read as parts of the totals', () => {
    const usage = {
      ...chatCompletion.usage,
      prompt_tokens: 5_000,
      completion_tokens: 900,
      prompt_tokens_details: { cached_tokens: 3_000, cache_write_tokens: 1_500 },
      completion_tokens_details: { reasoning_tokens: 640 },
    };
    expect(extractors.openai({ ...chatCompletion, usage })).toEqual({
      promptTokens: 5_000,
      completionTokens: 900,
      cacheReadTokens: 3_000,
      cacheWriteTokens: 1_500,
      reasoningTokens: 640,
    });
  });

  it.each([
    ['undefined', undefined],
    ['null', null],
    ['a string', 'text'],
    ['no usage', { id: 'x' }],
    ['usage null', { usage: null }],
    ['a partial usage', { usage: { prompt_tokens: 3 } }],
    ['negative counts', { usage: { prompt_tokens: -1, completion_tokens: 2, input_tokens: -1, output_tokens: 2 } }],
    ['string counts', { usage: { prompt_tokens: '3', completion_tokens: '2', input_tokens: '3', output_tokens: '2' } }],
  ])('when given %s, then every extractor returns undefined', (_label, value) => {
    expect(extractors.openai(value)).toBeUndefined();
    expect(extractors.openaiResponses(value)).toBeUndefined();
    expect(extractors.anthropic(value)).toBeUndefined();
  });

  it('when given the wrong provider shape, then it returns undefined rather than guessing', () => {
    expect(extractors.openai(anthropicMessage)).toBeUndefined();
    expect(extractors.anthropic(chatCompletion)).toBeUndefined();
  });
});

describe('token counts on model call steps', () => {
  let server: FakeRunguard;
  let guard: GuardClient;
  let close: () => Promise<void>;

  beforeEach(async () => {
    ({ server, guard, close } = await fakeRunguardAndClient());
  });

  afterEach(() => close());

  async function patchBodyFor(result: unknown, tokenExtractor?: (r: unknown) => unknown): Promise<unknown> {
    const returned = await guard.run('user-1', (run) =>
      run.modelCall(async () => result, { model: 'gpt-4o-mini', tokenExtractor: tokenExtractor as never }),
    );
    expect(returned).toBe(result);
    return server.requestsTo('PATCH', /\/steps\//)[0]?.body;
  }

  it.each([
    ['OpenAI chat', chatCompletion, extractors.openai, [19, 10], { cache_read_tokens: 0, reasoning_tokens: 0 }],
    ['OpenAI Responses', response, extractors.openaiResponses, [36, 87], { cache_read_tokens: 0, reasoning_tokens: 0 }],
    ['Anthropic', anthropicMessage, extractors.anthropic, [2095, 503], { cache_read_tokens: 0, cache_write_tokens: 0 }],
  ] as const)(
    'when the %s extractor is given, then the step is updated with its token counts',
    async (_label, result, extractor, [p, c], parts) => {
      expect(await patchBodyFor(result, extractor)).toEqual({
        status: 'COMPLETED',
        duration_ms: expect.any(Number),
        prompt_tokens: p,
        completion_tokens: c,
        ...parts,
      });
      expect(server.onlyRun().steps[0]).toMatchObject({ prompt_tokens: p, completion_tokens: c });
    },
  );

  it('when no extractor is given, then no token counts are sent even if the response has usage', async () => {
    expect(await patchBodyFor(chatCompletion)).toEqual({ status: 'COMPLETED', duration_ms: expect.any(Number) });
  });

  it.each([
    [
      'throws',
      () => {
        throw new Error('extractor bug');
      },
    ],
    ['returns undefined', () => undefined],
    ['returns null', () => null],
    ['returns garbage', () => 'lots'],
    ['returns negative numbers', () => [-1, -2]],
    ['returns fractions', () => [1.5, 2.5]],
  ])('when the extractor %s, then the call still succeeds without token counts', async (_label, extractor) => {
    expect(await patchBodyFor(chatCompletion, extractor)).toEqual({
      status: 'COMPLETED',
      duration_ms: expect.any(Number),
    });
  });

  it('when a custom extractor returns a tuple, then it is used', async () => {
    expect(
      await patchBodyFor({ tokens: { in: 5, out: 6 } }, (r) => {
        const { tokens } = r as { tokens: { in: number; out: number } };
        return [tokens.in, tokens.out];
      }),
    ).toMatchObject({ prompt_tokens: 5, completion_tokens: 6 });
  });

  it('when the model call fails, then the extractor is not consulted and the step is FAILED', async () => {
    let consulted = false;
    const boom = new Error('provider down');
    await expect(
      guard.run('user-1', (run) =>
        run.modelCall(
          async () => {
            throw boom;
          },
          {
            model: 'gpt-4o-mini',
            tokenExtractor: () => {
              consulted = true;
              return [1, 1];
            },
          },
        ),
      ),
    ).rejects.toBe(boom);
    expect(consulted).toBe(false);
    expect(server.requestsTo('PATCH', /\/steps\//)[0]?.body).toEqual({
      status: 'FAILED',
      duration_ms: expect.any(Number),
    });
  });
});
