/**
 * Watches a stream a model call returned, so that its step is reported when the stream ends: the
 * chunks pass to the caller untouched (the same object is returned, its methods intact), a reader
 * sees each on the side, and the end is reported once, COMPLETED or FAILED with the usage so far.
 *
 * Two shapes are watched:
 * - event-emitting runners (Anthropic's `MessageStream`, OpenAI's `ChatCompletionStream` and
 *   `ResponseStream`): they read the answer by themselves, whether iterated or not; their raw
 *   events are followed through `on()`, their end through `'end'` (emitted after an error or an
 *   abort too) and their `errored` / `aborted` flags. No `'error'` listener is added: one would
 *   silence the unhandled-rejection warning the SDK gives a caller who handles no error.
 * - any other async iterable (the SDKs' `Stream`, a generator, a web `ReadableStream`): its
 *   iterator is wrapped. The SDKs' `Stream` iterates through its own `iterator` function (so do
 *   its `tee()` and `toReadableStream()`): that is wrapped when present, else `Symbol.asyncIterator`.
 */

export type StreamOutcome = 'COMPLETED' | 'FAILED';

/** Why a watched stream ended FAILED, recorded in the step's output_data. */
export type StreamFailure = 'STREAM_ERROR' | 'STREAM_ABORTED' | 'CONSUMER_STOPPED' | 'NOT_CONSUMED';

export interface StreamWatch {
  /** Each chunk (or raw event), as it passes. */
  onChunk(chunk: unknown): void;
  /** The end, called once; the promise is the step's report. */
  onEnd(outcome: StreamOutcome, failure: StreamFailure | null): Promise<void>;
}

type Fields = Record<PropertyKey, unknown>;

const isObject = (value: unknown): value is Fields =>
  (typeof value === 'object' || typeof value === 'function') && value !== null;

/** An event-emitting stream runner, as both SDKs build them. */
function isRunner(value: Fields): boolean {
  return typeof value.on === 'function' && typeof value.done === 'function' && 'ended' in value;
}

function isAsyncIterable(value: Fields): boolean {
  return typeof value[Symbol.asyncIterator] === 'function';
}

/** True when `value` is a stream this module watches. */
export function isWatchableStream(value: unknown): boolean {
  return isObject(value) && (isRunner(value) || isAsyncIterable(value));
}

/** A handle on a watched stream, for its run's end. */
export interface WatchedStream {
  /**
   * Whether a failed report reached no caller: a runner's end is reported from its `'end'`
   * event, where nobody awaits it; an iterable's report is awaited by the caller's loop.
   */
  readonly unseenFailures: boolean;
  /**
   * The run is ending: a runner is waited for (it reads to its end by itself), any other stream
   * not yet ended is reported FAILED (NOT_CONSUMED). Resolves to the report's error, if any.
   */
  close(): Promise<unknown>;
}

/** Starts watching `value` (see `isWatchableStream`); reports through `watch`. */
export function watchStream(value: unknown, watch: StreamWatch): WatchedStream {
  const stream = value as Fields;
  let ended: Promise<void> | null = null;
  let settle!: (error: unknown) => void;
  // The report's error (undefined: none), once the end was reported.
  const reported = new Promise<unknown>((resolve) => {
    settle = resolve;
  });
  const end = (outcome: StreamOutcome, failure: StreamFailure | null): Promise<void> => {
    if (ended === null) {
      ended = watch.onEnd(outcome, failure);
      ended.then(() => settle(undefined), settle);
    }
    return ended;
  };

  if (isRunner(stream)) {
    const on = stream.on as (event: string, listener: (...args: unknown[]) => void) => void;
    // Anthropic's raw events, OpenAI chat's chunks, the Responses API's events: only one of them fires.
    for (const name of ['streamEvent', 'chunk', 'event'])
      on.call(stream, name, (chunk: unknown) => watch.onChunk(chunk));
    on.call(stream, 'end', () => {
      const failure: StreamFailure | null =
        stream.aborted === true ? 'STREAM_ABORTED' : stream.errored === true ? 'STREAM_ERROR' : null;
      // Nobody waits for this report where it could fail: `reported` carries it to the run's end.
      end(failure ? 'FAILED' : 'COMPLETED', failure).catch(() => {});
    });
    return { unseenFailures: true, close: () => reported };
  }

  const key: PropertyKey =
    Object.hasOwn(stream, 'iterator') && typeof stream.iterator === 'function' ? 'iterator' : Symbol.asyncIterator;
  const original = stream[key] as (this: unknown) => AsyncIterator<unknown>;
  Object.defineProperty(stream, key, {
    configurable: true,
    writable: true,
    value: function observed(this: unknown) {
      return observe(original.call(this), stream, watch, end);
    },
  });
  return {
    unseenFailures: false,
    close: () => {
      end('FAILED', 'NOT_CONSUMED').catch(() => {});
      return reported;
    },
  };
}

/** The SDKs' `Stream` ends quietly when its controller is aborted: an abort is not a complete answer. */
function aborted(stream: Fields): boolean {
  const controller = stream.controller as { signal?: { aborted?: boolean } } | undefined;
  return controller?.signal?.aborted === true;
}

function observe(
  iterator: AsyncIterator<unknown>,
  stream: Fields,
  watch: StreamWatch,
  end: (outcome: StreamOutcome, failure: StreamFailure | null) => Promise<void>,
): AsyncIterableIterator<unknown> {
  return {
    async next(...args: [] | [unknown]) {
      let result: IteratorResult<unknown>;
      try {
        result = await iterator.next(...args);
      } catch (error) {
        // Not `aborted()`: the SDKs abort their own controller on the way out of a broken stream.
        await end('FAILED', 'STREAM_ERROR').catch(() => {});
        throw error; // the stream's error says more than a failed report
      }
      if (result.done) {
        // Awaited: the caller's loop ends once the step is recorded, and a failed report reaches it.
        await end(aborted(stream) ? 'FAILED' : 'COMPLETED', aborted(stream) ? 'STREAM_ABORTED' : null);
        return result;
      }
      watch.onChunk(result.value);
      return result;
    },
    // A `break` (or an exception) in the caller's loop: the caller stopped reading early.
    async return(value?: unknown) {
      try {
        return iterator.return ? await iterator.return(value) : { done: true as const, value };
      } finally {
        await end('FAILED', 'CONSUMER_STOPPED');
      }
    },
    async throw(error?: unknown) {
      await end('FAILED', 'CONSUMER_STOPPED').catch(() => {});
      if (iterator.throw) return iterator.throw(error);
      throw error;
    },
    [Symbol.asyncIterator]() {
      return this;
    },
  };
}
