/**
 * Proxied calls between their forwarding and the end of their recording. A call's result is
 * written after its answer, so an app closing must wait for these as well as for the writes
 * already queued: a client cut at shutdown is told after the server has closed.
 */
export class CallsInProgress {
  private count = 0;
  private waiting: (() => void)[] = [];
  private readonly closing = new AbortController();

  /** Aborted once the app closes: a record that keeps failing then stops being retried. */
  get stopping(): AbortSignal {
    return this.closing.signal;
  }

  /** The app is closing: records still retried make one last attempt. */
  stop(): void {
    this.closing.abort();
  }

  /** One more call; the function answered ends it (once). */
  begin(): () => void {
    this.count++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      if (--this.count === 0) for (const resolve of this.waiting.splice(0)) resolve();
    };
  }

  /** Resolves when no call is in progress. */
  none(): Promise<void> {
    return this.count === 0 ? Promise.resolve() : new Promise((resolve) => this.waiting.push(resolve));
  }
}
