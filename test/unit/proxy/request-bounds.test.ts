/** What a proxied request says of its size, for its cost estimate (issue #34, part 3). */
import { describe, expect, it } from 'vitest';
import { isApiError } from '../../../src/errors.js';
import { requestBounds } from '../../../src/proxy/request-bounds.js';

describe('requestBounds', () => {
  it('when a chat request sets max_completion_tokens or max_tokens, then that is its output limit', () => {
    expect(requestBounds('/v1/chat/completions', { model: 'o3', max_completion_tokens: 50 }, 120)).toEqual({
      inputTokens: 120,
      maxOutputTokens: 50,
      choices: 1,
    });
    expect(requestBounds('/v1/chat/completions', { max_tokens: 70, n: 2 }, 10)).toEqual({
      inputTokens: 10,
      maxOutputTokens: 70,
      choices: 2,
    });
  });

  it('when a Responses request sets max_output_tokens, then that is its limit', () => {
    expect(requestBounds('/v1/responses', { max_output_tokens: 900 }, 5).maxOutputTokens).toBe(900);
  });

  it('when no limit is given or it is not a whole number, then there is none', () => {
    expect(requestBounds('/v1/messages', { max_tokens: 'many' }, 5).maxOutputTokens).toBeNull();
    expect(requestBounds('/v1/chat/completions', undefined, 0)).toEqual({
      inputTokens: 0,
      maxOutputTokens: null,
      choices: 1,
    });
  });

  it('when legacy completions ask for best_of candidates, then each counts', () => {
    expect(requestBounds('/v1/completions', { max_tokens: 10, n: 2, best_of: 5 }, 1).choices).toBe(5);
  });

  it('when the call is an embedding, then it writes no output', () => {
    expect(requestBounds('/v1/embeddings?x=1', { input: 'abc' }, 30)).toEqual({
      inputTokens: 30,
      maxOutputTokens: 0,
      choices: 1,
    });
  });

  it('when a Gemini call sets generationConfig.maxOutputTokens and candidateCount, then those bound it', () => {
    const body = {
      contents: [{ parts: [{ text: 'hi' }] }],
      generationConfig: { maxOutputTokens: 256, candidateCount: 2 },
    };
    expect(requestBounds('/v1beta/models/gemini-2.5-pro:generateContent', body, 40)).toEqual({
      inputTokens: 40,
      maxOutputTokens: 256,
      choices: 2,
    });
    // The REST API takes the proto's snake_case names as well.
    const snake = { generation_config: { max_output_tokens: 64, candidate_count: 3 } };
    expect(requestBounds('/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse', snake, 9)).toEqual({
      inputTokens: 9,
      maxOutputTokens: 64,
      choices: 3,
    });
  });

  it('when a Gemini call sets no limit, then there is none (the model table bounds it)', () => {
    expect(requestBounds('/v1beta/models/gemini-2.5-pro:generateContent', { generationConfig: {} }, 5)).toEqual({
      inputTokens: 5,
      maxOutputTokens: null,
      choices: 1,
    });
  });

  it('when a Gemini limit is past any real count, then the request is refused, naming it', () => {
    const body = { generationConfig: { maxOutputTokens: 1e300 } };
    let error: unknown;
    try {
      requestBounds('/v1beta/models/gemini-2.5-pro:generateContent', body, 5);
    } catch (caught) {
      error = caught;
    }
    expect(isApiError(error) && error.code).toBe('BAD_REQUEST');
    expect((error as Error).message).toContain('generationConfig.maxOutputTokens');
  });

  it('when a Gemini call embeds, then it writes no output', () => {
    for (const method of ['embedContent', 'batchEmbedContents'])
      expect(requestBounds(`/v1beta/models/gemini-embedding-001:${method}`, { content: {} }, 30)).toEqual({
        inputTokens: 30,
        maxOutputTokens: 0,
        choices: 1,
      });
  });
});
