/**
 * Runs tasks one at a time per key (a workspace), in the order they came, in this process. The
 * reserve mode's checks wait here before they take a pool connection and the workspace's
 * advisory lock: a burst of one workspace's calls then holds one connection per daemon while it
 * queues, not the whole pool (which every other workspace's requests need too).
 */
export class WorkspaceQueue {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const result = previous.then(task, task);
    // The tail settles whatever the task did; the last one out removes it.
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }
}
