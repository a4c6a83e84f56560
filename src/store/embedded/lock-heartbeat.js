// @ts-check
/**
 * The embedded lock's heartbeat, run in a worker thread of its own by `hold` (directory-lock.ts):
 * a thread, so that a busy main thread (a long PGlite query) does not let the lock go stale.
 * Every `updateMs` it checks that the file at the lock's path is still the one this process
 * created (else it says so, and stops), and refreshes its mtime through the file's descriptor
 * (shared by the process's threads). It says so too when refreshing has failed for `staleMs`.
 *
 * JavaScript, type-checked from its JSDoc (allowJs, @ts-check): a worker loads it as it is, from
 * dist/ and from the TypeScript source alike (tsx and vitest do not reach into worker threads).
 */
import { futimesSync, statSync } from 'node:fs';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';

/**
 * @typedef {object} HeartbeatData
 * @property {string} lockFile
 * @property {number} fd The lock file's descriptor, opened by the main thread.
 * @property {number} dev Identity of the file this process created, with `ino`.
 * @property {number} ino
 * @property {number} updateMs
 * @property {number} staleMs
 */

/** @typedef {{ lost: true } | { failed: string }} HeartbeatMessage What the heartbeat tells, once, before it stops. */

/**
 * Beats until the lock is lost or refreshing has failed for `staleMs`.
 * @param {HeartbeatData} data
 * @param {(message: HeartbeatMessage) => void} tell
 * @returns {() => void} stops it
 */
export function beat(data, tell) {
  let lastBeat = performance.now();
  const timer = setInterval(() => {
    try {
      /** @type {import('node:fs').Stats | null} */
      let found = null;
      try {
        found = statSync(data.lockFile);
      } catch (error) {
        if (/** @type {NodeJS.ErrnoException} */ (error).code !== 'ENOENT') throw error;
      }
      if (!found || found.dev !== data.dev || found.ino !== data.ino) {
        clearInterval(timer);
        tell({ lost: true });
        return;
      }
      const now = new Date();
      futimesSync(data.fd, now, now);
      lastBeat = performance.now();
    } catch (error) {
      if (performance.now() - lastBeat >= data.staleMs) {
        clearInterval(timer);
        tell({ failed: String(/** @type {Error | null} */ (error)?.message) });
      }
    }
  }, data.updateMs);
  return () => clearInterval(timer);
}

// Started as the worker: beat for the lock the main thread holds.
if (!isMainThread && parentPort) {
  const port = parentPort;
  beat(/** @type {HeartbeatData} */ (workerData), (message) => port.postMessage(message));
}
