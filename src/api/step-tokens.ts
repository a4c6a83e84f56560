/** A step result's token counts as PATCH gives them, checked for consistency before they price anything. */
import { ApiError } from '../errors.js';

interface GivenTokens {
  prompt_tokens?: number | null;
  completion_tokens?: number | null;
  cache_read_tokens?: number | null;
  cache_write_tokens?: number | null;
  reasoning_tokens?: number | null;
  cached_prompt_tokens?: number | null;
}

export interface StepTokens {
  promptTokens: number | null;
  completionTokens: number | null;
  cacheReadTokens: number | null;
  cacheWriteTokens: number | null;
  reasoningTokens: number | null;
}

/**
 * The counts, or a 400 naming what does not add up: cache reads and writes are parts of
 * `prompt_tokens` (every input token), reasoning tokens a part of `completion_tokens`. Counts
 * that do not add up would price input that was never billed, or none that was.
 */
export function stepTokens(body: GivenTokens): StepTokens {
  const read = body.cache_read_tokens ?? null;
  const alias = body.cached_prompt_tokens ?? null;
  if (read !== null && alias !== null && read !== alias) {
    throw new ApiError(
      'BAD_REQUEST',
      'cached_prompt_tokens is the older name of cache_read_tokens: give one, or the same number in both.',
    );
  }
  const tokens: StepTokens = {
    promptTokens: body.prompt_tokens ?? null,
    completionTokens: body.completion_tokens ?? null,
    cacheReadTokens: read ?? alias,
    cacheWriteTokens: body.cache_write_tokens ?? null,
    reasoningTokens: body.reasoning_tokens ?? null,
  };
  const cached = (tokens.cacheReadTokens ?? 0) + (tokens.cacheWriteTokens ?? 0);
  if (
    (tokens.cacheReadTokens !== null || tokens.cacheWriteTokens !== null) &&
    (tokens.promptTokens === null || cached > tokens.promptTokens)
  ) {
    throw new ApiError(
      'BAD_REQUEST',
      'cache_read_tokens and cache_write_tokens are parts of prompt_tokens, which counts every input token: ' +
        `give prompt_tokens of at least their sum (${cached}).`,
    );
  }
  if (
    tokens.reasoningTokens !== null &&
    (tokens.completionTokens === null || tokens.reasoningTokens > tokens.completionTokens)
  ) {
    throw new ApiError(
      'BAD_REQUEST',
      'reasoning_tokens are part of completion_tokens: give completion_tokens of at least reasoning_tokens.',
    );
  }
  return tokens;
}
