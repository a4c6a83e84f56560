/**
 * Gives a daemon's memory back once a load has passed. Under load V8 grows the young generation to
 * its ceiling (two 16 MB semi-spaces) and the old one past its live size; it shrinks them again
 * only in a collection that runs while little is allocated, and its own trigger for that (the
 * memory reducer) is armed by a full collection that happened to grow the heap: after some loads it
 * runs 20-30 s later, after others never, and an idle daemon then holds ~30 MB of empty young
 * generation for good, and an old generation grown by what a slow load promoted. So the daemon
 * looks every 5 s: idle for the last two looks (its event loop busy under 2% of the time) while
 * its heap is grown past its size after the last such collection, it collects once, which shrinks
 * both; then not again until the loop has been busy. A call that arrives meanwhile
 * waits for that one collection (tens of ms on a ~30 MB heap); a daemon under load, or idle with
 * its heap as small as it was, is not collected.
 */
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { performance } from 'node:perf_hooks';
import { runInNewContext } from 'node:vm';

export interface IdleMemoryOptions {
  /** How often the daemon looks. @default 5_000 */
  everyMs?: number;
  /** The event loop's busy share at or below which a period counts as idle. @default 0.02 */
  idleUtilization?: number;
  /** How much the heap's committed size may grow past its size after the last collection before it counts as grown. @default 4 MiB */
  grownBytes?: number;
}

export interface IdleMemory {
  /** Collections made so far. */
  readonly collections: number;
  stop(): void;
}

/**
 * A full collection that compacts: the `gc` function, without launching Node with --expose-gc
 * (exposed in a context of its own), run with compaction on. A plain full collection frees the
 * old generation's dead objects but leaves its pages where they are, each holding a few live
 * ones: after a load the old generation could stay megabytes above its size at start, committed
 * but mostly empty. Compacting moves the live objects together and gives the emptied pages back.
 * Only this collection compacts: under load V8's own full collections keep their cheaper choice.
 *
 * A plain full collection runs first. Compacting copies every live old object to fresh pages before
 * the old ones go back, so for ~100 ms the process holds its old generation twice; made while the
 * young generation still held its 32 MB of a load, that moment was ~30 MB above the load's own
 * peak (157-160 MB against 128-130 in `bench/rss-profile.ts`'s runs). The plain collection frees
 * the dead objects and gives the young generation back first: the compacting one then peaks below
 * what the load reached.
 */
function collector(): () => void {
  setFlagsFromString('--expose-gc');
  let gc: () => void;
  try {
    gc = runInNewContext('gc') as () => void;
  } finally {
    setFlagsFromString('--no-expose-gc');
  }
  return () => {
    gc();
    setFlagsFromString('--compact-on-every-full-gc');
    try {
      gc();
    } finally {
      setFlagsFromString('--no-compact-on-every-full-gc');
    }
  };
}

const heapBytes = () => getHeapStatistics().total_heap_size;

export function startIdleMemory(options: IdleMemoryOptions = {}): IdleMemory {
  const idleUtilization = options.idleUtilization ?? 0.02;
  const grownBytes = options.grownBytes ?? 4 * 1024 * 1024;
  const gc = collector();
  let collections = 0;
  let last = performance.eventLoopUtilization();
  // Once per load (the start is one): a collection that could not shrink the heap is not repeated
  // every few seconds of an idle daemon's life.
  let armed = true;
  // The heap's committed size after the last collection (at start: none yet, so a start's growth counts).
  let collectedBytes = 0;
  // Idle for two looks in a row: V8 shrinks the young generation only when its allocation rate,
  // taken over the last 5 s, is low, so a collection sooner after a load gives nothing back.
  let idleLooks = 0;
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const { utilization } = performance.eventLoopUtilization(now, last);
    last = now;
    if (utilization > idleUtilization) {
      armed = true;
      idleLooks = 0;
      return;
    }
    if (++idleLooks < 2 || !armed || heapBytes() <= collectedBytes + grownBytes) return;
    armed = false;
    gc();
    collections++;
    collectedBytes = heapBytes();
    // The collection's own time is not the loop being busy with work.
    last = performance.eventLoopUtilization();
  }, options.everyMs ?? 5_000);
  timer.unref();
  return {
    get collections() {
      return collections;
    },
    stop: () => clearInterval(timer),
  };
}
