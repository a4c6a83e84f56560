export interface GroupCommitOptions {
  /** Most items in one batch. @default 128 */
  maxBatch?: number;
  /**
   * Whether a failed batch is worth writing again item by item: yes when one item may have
   * caused it; no when the store itself failed (the items would fail again, or may have landed).
   * @default always
   */
  retryAlone?: (error: unknown) => boolean;
  /**
   * Least time between the starts of two batches. With 0, a batch goes as soon as the one before
   * it is written. More suits items whose callers are not waiting on them: under load they gather
   * for up to this long, so fewer, larger statements; a lone item after a quiet spell, or a full
   * batch, still goes at once. @default 0
   */
  minIntervalMs?: number;
  /**
   * Least time the oldest item waiting waits before its batch starts, even after a quiet spell;
   * items that join it meanwhile go with it (a full batch still goes at once). Suits writes that
   * would otherwise compete with the work that follows them: a proxied call's result, written the
   * moment its client has the answer, slowed that client's next call, then being checked.
   * @default 0
   */
  minDelayMs?: number;
}

/**
 * Natural group commit: writes submitted while a batch is being written go together in the next
 * one. A lone write goes at once (no timer, so no added latency at low load, unless `minDelayMs`
 * asks for one); under load, many writes share one statement and one commit, and each caller
 * still waits for its own durability.
 */
export class GroupCommit<I, O> {
  private queue: { item: I; submittedAt: number; resolve: (value: O) => void; reject: (error: unknown) => void }[] = [];
  private writing: Promise<void> | null = null;
  private readonly maxBatch: number;
  private readonly retryAlone: (error: unknown) => boolean;
  private readonly minIntervalMs: number;
  private readonly minDelayMs: number;
  private lastBatchAt = -Infinity;
  /** Ends the wait before the next batch early (it filled up meanwhile). */
  private wake: (() => void) | null = null;

  constructor(
    /** Writes a batch in one statement; answers per item, in order (an Error fails that item only). */
    private readonly write: (items: I[]) => Promise<(O | Error)[]>,
    options: GroupCommitOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? 128;
    this.retryAlone = options.retryAlone ?? (() => true);
    this.minIntervalMs = options.minIntervalMs ?? 0;
    this.minDelayMs = options.minDelayMs ?? 0;
  }

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, submittedAt: this.minDelayMs > 0 ? performance.now() : 0, resolve, reject });
      this.writing ??= this.drain();
      if (this.queue.length >= this.maxBatch) this.wake?.();
    });
  }

  /** Resolves once everything submitted so far is written (a graceful shutdown waits on it). */
  async settled(): Promise<void> {
    while (this.writing) await this.writing;
  }

  /**
   * Writes batches until the queue is empty. `writing` is cleared in the same synchronous step as
   * the last look at the queue: cleared later (say, in a `.finally` callback a microtask on), a
   * submit made in between by a caller whose answer just arrived would see a drain still running,
   * start none, and wait forever. (drain always awaits a write, or a wait before one, before it can
   * end, so it never ends before `submit` has stored its promise.)
   */
  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const wait =
          Math.max(this.lastBatchAt + this.minIntervalMs, this.queue[0]!.submittedAt + this.minDelayMs) -
          performance.now();
        // Submits made meanwhile join this batch. A full batch goes at once: waiting then would
        // only cap how many items a second can be written, and let the queue grow past it.
        if (wait > 0 && this.queue.length < this.maxBatch) await this.sleep(wait);
        this.lastBatchAt = performance.now();
        const batch = this.queue.splice(0, this.maxBatch);
        const items = batch.map((queued) => queued.item);
        let results: (O | Error)[];
        try {
          results = await this.write(items);
        } catch (error) {
          // One bad item (say, input the database refuses) must not fail the others: alone, each
          // gets its own answer.
          results =
            batch.length === 1 || !this.retryAlone(error)
              ? batch.map(() => asError(error))
              : await Promise.all(items.map((item) => this.writeAlone(item)));
        }
        batch.forEach((queued, i) => {
          const result = results[i]!;
          if (result instanceof Error) queued.reject(result);
          else queued.resolve(result);
        });
      }
    } finally {
      this.writing = null;
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.wake = wake;
    });
  }

  private async writeAlone(item: I): Promise<O | Error> {
    try {
      return (await this.write([item]))[0]!;
    } catch (error) {
      return asError(error);
    }
  }
}

const asError = (error: unknown): Error => (error instanceof Error ? error : new Error(String(error)));
