/** Answers as the OpenAI SDK returns them, for the SDK's token extractors and model calls. */

/** A chat completion as `openai.chat.completions.create` returns it (openai 6.x, non-streaming), trimmed of nothing. */
export function openaiChatCompletion(content: string, prompt: number, completion: number) {
  return {
    id: 'chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG',
    object: 'chat.completion',
    created: 1741570283,
    model: 'gpt-4o-mini-2024-07-18',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content, refusal: null, annotations: [] },
        logprobs: null,
        finish_reason: 'stop',
      },
    ],
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: 0,
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    },
    service_tier: 'default',
    system_fingerprint: 'fp_06737a9306',
  };
}
