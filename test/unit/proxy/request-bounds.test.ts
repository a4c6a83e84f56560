/** What a proxied request says of its size, for its cost estimate (issue #34, part 3). */
import { describe, expect, it } from 'vitest';
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
});
