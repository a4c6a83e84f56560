import { performance } from 'node:perf_hooks';
import { ConflictError, GuardBlockedError, GuardError } from './errors.js';
import { isTokenCount } from './extractors.js';
import type { HttpClient } from './http.js';
import type {
  Decision,
  JsonObject,
  ModelCallOptions,
  StepCreated,
  StepCreateParams,
  StepFn,
  StepUpdated,
  StepUpdateParams,
  TokenExtractor,
  ToolCallOptions,
} from './types.js';

/** What a run handle is built from; created by `GuardClient.run`. */
export interface RunHandleInit {
  id: string;
  userId: string;
  metadata: JsonObject | null;
  decision: Decision;
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

  readonly #http: HttpClient;
  #nextSequence = 1;
  #ended = false;

  /** @internal */
  constructor(http: HttpClient, init: RunHandleInit) {
    this.#http = http;
    this.id = init.id;
    this.userId = init.userId;
    this.metadata = init.metadata;
    this.decision = init.decision;
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
        params: { type: 'MODEL_CALL', model: options.model, ...inputData(options.inputData) },
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

  #execute<T>(spec: StepSpec, fn: StepFn<T>, extractor: TokenExtractor<T> | undefined): Promise<T> {
    if (typeof fn !== 'function') return Promise.reject(new GuardError(`${spec.label} needs a function to run.`));
    if (this.#ended) {
      return Promise.reject(new GuardError(`Run ${this.id} has ended; record steps inside the guard.run callback.`));
    }
    // Taken synchronously, before any await, so calls started together (Promise.all) get distinct,
    // ordered sequences. A sequence whose creation failed is never reused: the server may have stored it.
    return this.#runStep(spec, this.#nextSequence++, fn, extractor);
  }

  async #runStep<T>(spec: StepSpec, firstSequence: number, fn: StepFn<T>, extractor: TokenExtractor<T> | undefined): Promise<T> {
    const { created, sequence } = await this.#createStep(spec, firstSequence);
    if (created.status === 'BLOCKED' || created.decision?.outcome === 'DENY') {
      throw new GuardBlockedError(
        { kind: 'step', userId: this.userId, runId: this.id, stepId: created.id, stepLabel: `${spec.label} (step ${sequence})` },
        created.decision?.reason ?? null,
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
    // A failed report propagates: silently dropping token counts would let spend escape the budgets.
    await this.#updateStep(created.id, {
      status: 'COMPLETED',
      duration_ms: elapsedMs(startedAt),
      ...tokenCounts(extractor, result),
    });
    return result;
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

/** Never lets a faulty extractor break the call: anything unusable means "no token counts". */
function tokenCounts<T>(
  extractor: TokenExtractor<T> | undefined,
  result: T,
): Pick<StepUpdateParams, 'prompt_tokens' | 'completion_tokens'> {
  if (!extractor) return {};
  let counts: unknown;
  try {
    counts = extractor(result);
  } catch {
    return {};
  }
  if (!Array.isArray(counts)) return {};
  const [prompt, completion] = counts as unknown[];
  const out: Pick<StepUpdateParams, 'prompt_tokens' | 'completion_tokens'> = {};
  if (isTokenCount(prompt)) out.prompt_tokens = prompt;
  if (isTokenCount(completion)) out.completion_tokens = completion;
  return out;
}
