/**
 * Events found by scanning the records rather than written by one change: budget thresholds
 * (spend is raised by batched statements on the hot path, which stay as they are), denials
 * aggregated per window, and runs that failed. Each scan is idempotent (dedupe keys) and safe
 * with any number of daemons; a daemon that dies between two scans loses nothing, the next scan
 * anywhere finds the same records.
 */
import type { Db } from '../store/db.js';
import { isTimeZone, localDay, PERIODS, scannedWindows } from '../periods.js';
import {
  type DenialEventType,
  insertBudgetThresholdEvents,
  insertDenialEvents,
  insertRunFailedEvents,
  insertThresholdEvents,
  lockCursor,
  moveCursor,
  type ScannedWindow,
  workspacesWatchingBudgets,
} from '../store/webhook-outbox.js';

/** Failed runs are looked for up to this long ago: their end has committed by then, nearly always. */
const SETTLE_MS = 2_000;
/** Failed runs are looked for this far behind the cursor too: a late commit is still found (once). */
const FAILED_RUN_OVERLAP_MS = 60_000;
/** At most this many denial windows are emitted per scan; a cursor further behind skips ahead. */
const MAX_WINDOWS = 288;
const DAY_MS = 86_400_000;

const utcDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/**
 * The seed's daily budgets, then the budgets of `/v1/budgets`. Daily budgets: yesterday, today and
 * tomorrow in UTC hold every workspace's local today and yesterday (zones run from UTC-12 to
 * UTC+14), so a crossing just before local midnight is found after it.
 */
export async function scanThresholds(db: Db, now: Date, fractionsPpm: number[]): Promise<number> {
  if (fractionsPpm.length === 0) return 0;
  const at = now.getTime();
  const daily = await insertThresholdEvents(
    db,
    [utcDay(at - DAY_MS), utcDay(at), utcDay(at + DAY_MS)],
    fractionsPpm,
    now,
  );
  return daily + (await scanBudgetThresholds(db, now, fractionsPpm));
}

/**
 * Each budget's current window in its workspace's time zone, and on a window's first day the one
 * just over (found after its end, as a daily budget's yesterday is).
 */
async function scanBudgetThresholds(db: Db, now: Date, fractionsPpm: number[]): Promise<number> {
  const windows: ScannedWindow[] = [];
  for (const workspace of await workspacesWatchingBudgets(db)) {
    // A zone this runtime does not know (another runtime's data) spoils no other workspace's scan.
    if (!isTimeZone(workspace.time_zone)) continue;
    const local = localDay(now, workspace.time_zone);
    for (const period of PERIODS) {
      for (const window of scannedWindows(local, period)) {
        windows.push({
          workspaceId: workspace.id,
          ...window,
          day: window.lastDay < local.day ? window.lastDay : local.day,
        });
      }
    }
  }
  return insertBudgetThresholdEvents(db, windows, fractionsPpm, now);
}

/** How denials are aggregated (the settings `webhookDenialWindowMs` and `webhookDenialSettleMs`). */
export interface DenialWindows {
  /** One counted event per subject and reason per window of this length. */
  windowMs: number;
  /**
   * A window is counted this long after it ends: a denial committed later than that (a database
   * stalled for longer) is not in its window's count. Windows cannot be recounted without sending a
   * second event for them; minutes-long windows make the wait unnoticeable.
   */
  settleMs: number;
}

/**
 * Sends each window's first denial of a subject and reason at once, then closes the denial windows
 * that ended (and settled) since the last scan with their counts, each once across daemons.
 */
export async function scanDenials(db: Db, now: Date, windows: DenialWindows): Promise<number> {
  let emitted = 0;
  // Every denial as guard.denied; tool calls' also per tool, as tool.denied (docs/mcp.md).
  for (const type of ['guard.denied', 'tool.denied'] as const) {
    emitted += await scanFirstDenials(db, now, windows.windowMs, type);
    emitted += await closeDenialWindows(db, now, windows, type);
  }
  return emitted;
}

/**
 * The first denial of each subject and reason in the open window, and in the one before (a denial
 * still committing as it ended): once each, by dedupe key, whichever daemon sees it first.
 */
async function scanFirstDenials(db: Db, now: Date, windowMs: number, type: DenialEventType): Promise<number> {
  const current = Math.floor(now.getTime() / windowMs) * windowMs;
  let emitted = 0;
  for (const start of [current - windowMs, current]) {
    const end = start + windowMs;
    emitted += await insertDenialEvents(
      db,
      {
        from: new Date(start),
        to: new Date(Math.min(end, now.getTime() + 1)),
        windowStart: new Date(start),
        windowEnd: new Date(end),
        first: true,
      },
      now,
      type,
    );
  }
  return emitted;
}

async function closeDenialWindows(
  db: Db,
  now: Date,
  { windowMs, settleMs }: DenialWindows,
  type: DenialEventType,
): Promise<number> {
  const current = Math.floor(now.getTime() / windowMs) * windowMs;
  return db.transaction(async (tx) => {
    const position = await lockCursor(tx, type, new Date(current));
    if (!position) return 0; // another daemon is scanning
    let from = position.getTime();
    // Far behind (no daemon ran for a while): only the last day's windows are still news.
    const earliest = Math.floor((now.getTime() - DAY_MS) / windowMs) * windowMs;
    if (from < earliest) from = earliest;
    let emitted = 0;
    for (let windows = 0; windows < MAX_WINDOWS && from + windowMs + settleMs <= now.getTime(); windows++) {
      const [windowStart, windowEnd] = [new Date(from), new Date(from + windowMs)];
      emitted += await insertDenialEvents(
        tx,
        { from: windowStart, to: windowEnd, windowStart, windowEnd, first: false },
        now,
        type,
      );
      from += windowMs;
    }
    if (from !== position.getTime()) await moveCursor(tx, type, new Date(from));
    return emitted;
  });
}

export async function scanFailedRuns(db: Db, now: Date): Promise<number> {
  return db.transaction(async (tx) => {
    const to = new Date(now.getTime() - SETTLE_MS);
    const position = await lockCursor(tx, 'run.failed', to);
    if (!position) return 0;
    const from = new Date(Math.max(position.getTime() - FAILED_RUN_OVERLAP_MS, now.getTime() - DAY_MS));
    const emitted = to > from ? await insertRunFailedEvents(tx, from, to, now) : 0;
    if (to > position) await moveCursor(tx, 'run.failed', to);
    return emitted;
  });
}
