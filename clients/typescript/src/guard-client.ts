import { AsyncLocalStorage } from 'node:async_hooks';
import { resolveClientOptions } from './client-options.js';
import { GuardBlockedError, GuardError, NoActiveRunError } from './errors.js';
import { HttpClient } from './http.js';
import { RunHandle } from './run-handle.js';
import type {
  ClientOptions,
  FinalStatus,
  ModelCallOptions,
  RunCreated,
  RunCreateParams,
  RunEnded,
  RunLimitOptions,
  RunOptions,
  StepFn,
  ToolCallOptions,
} from './types.js';

/**
 * Client of the runguard daemon. Wraps an agent's work in guarded runs and steps:
 *
 * ```ts
 * const guard = new GuardClient({ apiKey: process.env.RUNGUARD_API_KEY! });
 * const answer = await guard.run('user-123', async (run) => {
 *   const reply = await run.modelCall(() => openai.chat.completions.create(req),
 *     { model: 'gpt-4o-mini', tokenExtractor: extractors.openai });
 *   return run.toolCall(() => search(reply), { toolName: 'search' });
 * });
 * await guard.close();
 * ```
 *
 * One instance can serve many concurrent runs; each run's steps are numbered independently.
 */
export class GuardClient {
  /** Address of the daemon, without a trailing slash. */
  readonly baseUrl: string;
  /** Time allowed for one HTTP attempt, in milliseconds. */
  readonly timeoutMs: number;
  /** Retries after a failed attempt. */
  readonly maxRetries: number;

  // Private fields keep the API key out of console.log and JSON.stringify of the client.
  readonly #http: HttpClient;
  // Per instance, not per module: two clients (two workspaces) never see each other's runs.
  readonly #currentRun = new AsyncLocalStorage<RunHandle>();

  /**
   * Checks the options, makes no request.
   * @throws {GuardConfigError} when the API key is malformed or an option is invalid.
   */
  constructor(options: ClientOptions = {}) {
    const config = resolveClientOptions(options);
    this.baseUrl = config.baseUrl;
    this.timeoutMs = config.timeoutMs;
    this.maxRetries = config.maxRetries;
    this.#http = new HttpClient(config);
  }

  /**
   * Starts a run for `userId`, calls `fn` with its handle, and ends the run: COMPLETED when `fn`
   * resolves (its value is returned), FAILED when it throws (the same error is re-thrown, even if
   * ending the run fails too). Inside `fn`, `guard.modelCall` and `guard.toolCall` use this run.
   *
   * @throws {GuardBlockedError} when a guardrail denies the run start; `fn` is not called.
   * @throws {APIError | APIConnectionError} when the start or the end of the run fails.
   */
  async run<T>(userId: string, fn: (run: RunHandle) => T | PromiseLike<T>, options?: RunOptions): Promise<T> {
    this.#http.assertOpen();
    if (typeof userId !== 'string' || userId === '') throw new GuardError('guard.run needs a non-empty userId string.');
    if (typeof fn !== 'function') throw new GuardError('guard.run needs a function to run.');

    const metadata = options?.metadata ?? null;
    const body: RunCreateParams = { user_id: userId };
    if (options?.metadata !== undefined) body.metadata = options.metadata;
    if (options?.limits !== undefined) body.limits = runLimitsBody(options.limits);
    if (options?.tags !== undefined) body.tags = options.tags;
    const created = await this.#http.request<RunCreated>({ method: 'POST', path: '/v1/runs/', body });
    if (created.status === 'BLOCKED' || created.decision?.outcome === 'DENY') {
      throw new GuardBlockedError(
        { kind: 'run', userId, runId: created.id },
        created.decision?.reason ?? null,
        created.decision?.detail ?? null,
      );
    }

    const run = new RunHandle(this.#http, {
      id: created.id,
      userId,
      metadata,
      decision: created.decision,
      limits: created.limits ?? null,
      tags: created.tags ?? {},
    });
    let result: T;
    try {
      result = await this.#currentRun.run(run, fn, run);
      // The streams its model calls returned are reported before the run ends.
      await run.settleStreams();
    } catch (error) {
      await run.settleStreams().catch(() => {});
      try {
        await this.#endRun(run, 'FAILED');
      } catch {
        // fn's error is what the caller needs; the server's idle timeout ends the run if this failed.
      }
      throw error;
    }
    await this.#endRun(run, 'COMPLETED');
    return result;
  }

  /** The run whose callback is executing, or undefined outside `guard.run`. */
  get currentRun(): RunHandle | undefined {
    return this.#currentRun.getStore();
  }

  /**
   * `run.modelCall` on the current run, for code deep inside `guard.run` that has no handle.
   * @throws {NoActiveRunError} outside `guard.run`.
   */
  async modelCall<T>(fn: StepFn<T>, options: ModelCallOptions<T>): Promise<T> {
    // No await before the delegation: the step's sequence is still taken synchronously.
    return this.#requireRun('modelCall').modelCall(fn, options);
  }

  /**
   * `run.toolCall` on the current run, for code deep inside `guard.run` that has no handle.
   * @throws {NoActiveRunError} outside `guard.run`.
   */
  async toolCall<T>(fn: StepFn<T>, options: ToolCallOptions): Promise<T> {
    return this.#requireRun('toolCall').toolCall(fn, options);
  }

  /**
   * Aborts in-flight requests and refuses new ones with `ClientClosedError`. Runs still open are
   * left to the server's idle timeout. Calling it again does nothing.
   */
  async close(): Promise<void> {
    this.#http.close();
  }

  #requireRun(method: string): RunHandle {
    this.#http.assertOpen();
    const run = this.#currentRun.getStore();
    if (!run) {
      throw new NoActiveRunError(
        `guard.${method}() was called outside guard.run(); call it inside the run callback or use the run handle.`,
      );
    }
    return run;
  }

  async #endRun(run: RunHandle, status: FinalStatus): Promise<RunEnded> {
    run.markEnded();
    return this.#http.request<RunEnded>({
      method: 'POST',
      path: `/v1/runs/${encodeURIComponent(run.id)}/end`,
      body: { status },
    });
  }
}

/** The SDK's camelCase limits as the wire's; only those given are sent. */
function runLimitsBody(limits: RunLimitOptions): NonNullable<RunCreateParams['limits']> {
  const body: NonNullable<RunCreateParams['limits']> = {};
  if (limits.maxSteps !== undefined) body.max_steps = limits.maxSteps;
  if (limits.maxCostUsd !== undefined) body.max_cost_usd = limits.maxCostUsd;
  if (limits.maxIdenticalCalls !== undefined) body.max_identical_calls = limits.maxIdenticalCalls;
  return body;
}
