import { performance } from 'node:perf_hooks';
import { ConflictError, GuardBlockedError, GuardError } from './errors.js';
import { chunkwiseReader, isTokenCount } from './extractors.js';
import { isWatchableStream, watchStream, type WatchedStream } from './stream-watch.js';
import type { HttpClient } from './http.js';
import type {
  Decision,
  JsonObject,
  RunLimits,
  ModelCallOptions,
  StepCreated,
  StepCreateParams,
  StepFn,
  StepUpdated,
  StepUpdateParams,
  StreamUsageReader,
  TokenExtractor,
  TokenUsage,
  ToolCallOptions,
} from './types.js';

/** What a run handle is built from; created by `GuardClient.run`. */
export interface RunHandleInit {
  id: string;
  userId: string;
  metadata: JsonObject | null;
  decision: Decision;
  limits?: RunLimits | null;
  tags?: Record<string, string>;
}

/** The largest sequence the API takes (a Postgres integer). */
const MAX_SEQUENCE = 2_147_483_647;

interface StepSpec {
  params: Omit<StepCreateParams, 'sequence'>;
  /** For messages: `Model call "gpt-4o"`. */
  label: string;
}

/**
 * One started run. Passed to the callback of `guard.run`; records model and tool calls as steps.
 * Create it through `GuardClient.run`, never directly.
 */
export class RunHandle {
  /** Run id (UUID) assigned by the server. */
  readonly id: string;
  /** The SDK user the run belongs to. */
  readonly userId: string;
  /** Metadata the run was started with. */
  readonly metadata: JsonObject | null;
  /** The guardrail decision that allowed the run. */
  readonly decision: Decision;
  /** The limits that apply to the run (its own and the workspace's, the tighter); null: none. */
  readonly limits: RunLimits | null;
  /** The tags the run carries, as its start answered them (`{}`: none). */
  readonly tags: Readonly<Record<string, string>>;

  readonly #http: HttpClient;
  #nextSequence = 1;
  #ended = false;
  /** Streams returned by model calls, reported when they end; the run's end waits for them. */
  readonly #streams = new Set<WatchedStream>();

  /** @internal */
  constructor(http: HttpClient, init: RunHandleInit) {
    this.#http = http;
    this.id = init.id;
    this.userId = init.userId;
    this.metadata = init.metadata;
    this.decision = init.decision;
    this.limits = init.limits ?? null;
    this.tags = init.tags ?? {};
  }

  /** True once the run was ended; later steps are refused. */
  get ended(): boolean {
    return this.#ended;
  }

  /**
   * Records a MODEL_CALL step around `fn`: the step is checked by the guardrails first, and `fn`
   * runs only when allowed; then the step is updated with its outcome, duration and token counts.
   *
   * @throws {GuardBlockedError} when a guardrail denies the step; `fn` is not called.
   * @throws whatever `fn` throws (the same error object), after the step is marked FAILED.
   */
  modelCall<T>(fn: StepFn<T>, options: ModelCallOptions<T>): Promise<T> {
    if (typeof options?.model !== 'string' || options.model === '') {
      return Promise.reject(new GuardError('modelCall needs options.model (the model identifier).'));
    }
    return this.#execute(
      {
        params: {
          type: 'MODEL_CALL',
          model: options.model,
          ...inputData(options.inputData),
          ...(options.maxCostUsd !== undefined && { max_cost_usd: options.maxCostUsd }),
        },
        label: `Model call "${options.model}"`,
      },
      fn,
      options.tokenExtractor,
    );
  }

  /**
   * Records a TOOL_CALL step around `fn`; same flow as {@link modelCall}, without token counts.
   *
   * @throws {GuardBlockedError} when a guardrail denies the step; `fn` is not called.
   * @throws whatever `fn` throws (the same error object), after the step is marked FAILED.
   */
  toolCall<T>(fn: StepFn<T>, options: ToolCallOptions): Promise<T> {
    if (typeof options?.toolName !== 'string' || options.toolName === '') {
      return Promise.reject(new GuardError('toolCall needs options.toolName.'));
    }
    return this.#execute(
      {
        params: { type: 'TOOL_CALL', tool_name: options.toolName, ...inputData(options.inputData) },
        label: `Tool call "${options.toolName}"`,
      },
      fn,
      undefined,
    );
  }

  /** @internal Called by `GuardClient.run` before ending the run, so no step can start after it. */
  markEnded(): void {
    this.#ended = true;
  }

  /**
   * @internal Called by `GuardClient.run` before ending the run: waits for the streams model calls
   * returned to be reported (a stream nobody read to its end is reported FAILED), and throws a
   * failed report that reached no caller, as a failed report of any other step would.
   */
  async settleStreams(): Promise<void> {
    const streams = [...this.#streams];
    this.#streams.clear();
    const errors = await Promise.all(
      streams.map(async (stream) => ({ error: await stream.close(), unseen: stream.unseenFailures })),
    );
    const lost = errors.find((closed) => closed.unseen && closed.error !== undefined);
    if (lost) throw lost.error;
  }

  #execute<T>(spec: StepSpec, fn: StepFn<T>, extractor: TokenExtractor<T> | undefined): Promise<T> {
    if (typeof fn !== 'function') return Promise.reject(new GuardError(`${spec.label} needs a function to run.`));
    if (this.#ended) {
      return Promise.reject(new GuardError(`Run ${this.id} has ended; record steps inside the guard.run callback.`));
    }
    // Taken synchronously, before any await, so calls started together (Promise.all) get distinct,
    // ordered sequences. A sequence whose creation failed is never reused: the server may have stored it.
    return this.#runStep(spec, this.#nextSequence++, fn, extractor);
  }

  async #runStep<T>(
    spec: StepSpec,
    firstSequence: number,
    fn: StepFn<T>,
    extractor: TokenExtractor<T> | undefined,
  ): Promise<T> {
    const { created, sequence } = await this.#createStep(spec, firstSequence);
    if (created.status === 'BLOCKED' || created.decision?.outcome === 'DENY') {
      throw new GuardBlockedError(
        {
          kind: 'step',
          userId: this.userId,
          runId: this.id,
          stepId: created.id,
          stepLabel: `${spec.label} (step ${sequence})`,
        },
        created.decision?.reason ?? null,
        created.decision?.detail ?? null,
      );
    }

    const startedAt = performance.now();
    let result: T;
    try {
      result = await fn();
    } catch (error) {
      try {
        await this.#updateStep(created.id, { status: 'FAILED', duration_ms: elapsedMs(startedAt) });
      } catch {
        // The caller's error says more than a failed report; the server's idle timeout closes the gap.
      }
      throw error;
    }
    if (isWatchableStream(result)) {
      this.#watch(created.id, result, startedAt, extractor);
      return result;
    }
    // A failed report propagates: silently dropping token counts would let spend escape the budgets.
    await this.#updateStep(created.id, {
      status: 'COMPLETED',
      duration_ms: elapsedMs(startedAt),
      ...tokenCounts(extractor, result),
    });
    return result;
  }

  /**
   * A stream is priced like any other call: its chunks pass through untouched, a reader folds
   * their usage on the side, and the step is reported when the stream ends (COMPLETED), or FAILED
   * with the usage so far when it breaks, is aborted or its reader stops early. The duration runs
   * to the stream's end.
   */
  #watch<T>(stepId: string, stream: T, startedAt: number, extractor: TokenExtractor<T> | undefined): void {
    const reader: StreamUsageReader | null = !extractor
      ? null
      : typeof extractor.streamReader === 'function'
        ? extractor.streamReader()
        : chunkwiseReader(extractor);
    const watched = watchStream(stream, {
      onChunk(chunk) {
        try {
          reader?.onChunk(chunk);
        } catch {
          // A faulty reader means no counts, never a broken stream.
        }
      },
      onEnd: async (outcome, failure) => {
        await this.#updateStep(stepId, {
          status: outcome,
          duration_ms: elapsedMs(startedAt),
          ...countsOf(safeUsage(reader)),
          ...(failure ? { output_data: { stream: true, error: failure } } : {}),
        });
        // Reported: nothing left for the run's end. A failed report stays, for settleStreams to throw.
        this.#streams.delete(watched);
      },
    });
    this.#streams.add(watched);
  }

  /**
   * Creates the step with `sequence`, or past it. Calls proxied into this run
   * (`/proxy/runs/<id>/...`) take the run's next numbers on the server, unseen here: when one holds
   * the number, the step tries again further on, the jump doubling each time, so that a run with
   * many proxied calls is passed in a few tries. Sequences order a run's steps; the gaps this
   * leaves are allowed, as are the ones the proxy's own retries leave.
   */
  async #createStep(spec: StepSpec, sequence: number): Promise<{ created: StepCreated; sequence: number }> {
    for (let jump = 1; ; jump *= 2) {
      try {
        const created = await this.#http.request<StepCreated>({
          method: 'POST',
          path: `/v1/runs/${encodeURIComponent(this.id)}/steps`,
          body: { ...spec.params, sequence } satisfies StepCreateParams,
        });
        return { created, sequence };
      } catch (error) {
        const taken = error instanceof ConflictError && error.code === 'DUPLICATE_SEQUENCE';
        if (!taken || sequence + jump > MAX_SEQUENCE) throw error;
        this.#nextSequence = Math.max(this.#nextSequence, sequence + jump);
        sequence = this.#nextSequence++;
      }
    }
  }

  #updateStep(stepId: string, params: StepUpdateParams): Promise<StepUpdated> {
    return this.#http.request<StepUpdated>({
      method: 'PATCH',
      path: `/v1/runs/${encodeURIComponent(this.id)}/steps/${encodeURIComponent(stepId)}`,
      body: params,
    });
  }
}

function inputData(value: JsonObject | null | undefined): Pick<StepCreateParams, 'input_data'> {
  return value === undefined ? {} : { input_data: value };
}

function elapsedMs(startedAt: number): number {
  return Math.max(0, Math.round(performance.now() - startedAt));
}

function safeUsage(reader: StreamUsageReader | null): unknown {
  try {
    return reader?.usage();
  } catch {
    return undefined;
  }
}

type TokenFields = Pick<
  StepUpdateParams,
  'prompt_tokens' | 'completion_tokens' | 'cache_read_tokens' | 'cache_write_tokens' | 'reasoning_tokens'
>;

/** Never lets a faulty extractor break the call: anything unusable means "no token counts". */
function tokenCounts<T>(extractor: TokenExtractor<T> | undefined, result: T): TokenFields {
  if (!extractor) return {};
  try {
    return countsOf(extractor(result));
  } catch {
    return {};
  }
}

/**
 * The fields of `[prompt, completion]` or a {@link TokenUsage}. Parts that do not add up (cache
 * tokens past the prompt, reasoning past the completion) are left out, not sent for the server
 * to refuse the whole report.
 */
function countsOf(counts: unknown): TokenFields {
  if (Array.isArray(counts)) {
    const [prompt, completion] = counts as unknown[];
    return countsOf({ promptTokens: prompt, completionTokens: completion });
  }
  if (typeof counts !== 'object' || counts === null) return {};
  const usage = counts as Partial<Record<keyof TokenUsage, unknown>>;
  const out: TokenFields = {};
  if (isTokenCount(usage.promptTokens)) out.prompt_tokens = usage.promptTokens;
  if (isTokenCount(usage.completionTokens)) out.completion_tokens = usage.completionTokens;
  const read = isTokenCount(usage.cacheReadTokens) ? usage.cacheReadTokens : 0;
  const write = isTokenCount(usage.cacheWriteTokens) ? usage.cacheWriteTokens : 0;
  if (typeof out.prompt_tokens === 'number' && read + write <= out.prompt_tokens) {
    if (isTokenCount(usage.cacheReadTokens)) out.cache_read_tokens = usage.cacheReadTokens;
    if (isTokenCount(usage.cacheWriteTokens)) out.cache_write_tokens = usage.cacheWriteTokens;
  }
  if (
    typeof out.completion_tokens === 'number' &&
    isTokenCount(usage.reasoningTokens) &&
    usage.reasoningTokens <= out.completion_tokens
  ) {
    out.reasoning_tokens = usage.reasoningTokens;
  }
  return out;
}
