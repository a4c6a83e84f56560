/**
 * Sequences for the steps whose caller names none (proxied calls), allocated in this process:
 * parallel calls in one run take numbers without queueing on a shared counter row. A run's
 * highest sequence is read once, when this daemon first allocates in it. The steps' unique
 * constraint arbitrates with other daemons and with sequences clients chose; after a collision
 * the caller resyncs and takes the next number. Numbers of failed inserts are skipped, so
 * allocated sequences are increasing but may have gaps.
 */
export class SequenceAllocator {
  /**
   * Per run, the last number handed out: the read of the run's highest while it is under way,
   * then the counter itself, which `next` takes from without waiting.
   */
  private readonly last = new Map<string, Counter | Promise<Counter>>();

  constructor(
    private readonly readHighest: (runId: string) => Promise<number>,
    /** Runs remembered; the oldest is forgotten first (and read again if it comes back). */
    private readonly capacity = 10_000,
  ) {}

  /** A run this daemon just started, with steps up to `highest`: no read needed. */
  started(runId: string, highest: number): void {
    this.remember(runId, { value: highest });
  }

  /** A run that ended: it takes no more steps, so its number need not be kept. */
  ended(runId: string): void {
    this.last.delete(runId);
  }

  /** The run's next number at once, when its highest is known here; else undefined (allocate). */
  next(runId: string): number | undefined {
    const last = this.last.get(runId);
    return last === undefined || last instanceof Promise ? undefined : ++last.value;
  }

  async allocate(runId: string): Promise<number> {
    const last = await this.entry(runId);
    return ++last.value;
  }

  /** A sequence was used in the run by someone else: later allocations go past it. */
  async observe(runId: string, sequence: number): Promise<void> {
    const known = this.last.get(runId);
    if (!known) return; // the first allocation will read it from the records
    const last = await known;
    last.value = Math.max(last.value, sequence);
  }

  /** An allocated number was taken: catch up with the run's highest sequence in the records. */
  async resync(runId: string): Promise<void> {
    const [last, highest] = await Promise.all([this.entry(runId), this.readHighest(runId)]);
    last.value = Math.max(last.value, highest);
  }

  private async entry(runId: string): Promise<Counter> {
    const known = this.last.get(runId);
    if (known) return known;
    const reading = this.readHighest(runId).then((value) => ({ value }));
    this.remember(runId, reading);
    try {
      const counter = await reading;
      // Still ours (not forgotten meanwhile): from now on taken without waiting.
      if (this.last.get(runId) === reading) this.last.set(runId, counter);
      return counter;
    } catch (error) {
      // A failed read is not remembered: the next allocation reads again.
      if (this.last.get(runId) === reading) this.last.delete(runId);
      throw error;
    }
  }

  private remember(runId: string, entry: Counter | Promise<Counter>): void {
    if (this.last.size >= this.capacity && !this.last.has(runId)) this.last.delete(this.last.keys().next().value!);
    this.last.set(runId, entry);
  }
}

interface Counter {
  value: number;
}
