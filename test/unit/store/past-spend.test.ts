/**
 * What a daemon on Redis remembers of a budget window's past days (past-spend.ts): used only at
 * the state version and on the day it was read, for at most its age limit; a read under way
 * shared only by decisions that read the same version; the windows added up with today's spend.
 */
import { describe, expect, it } from 'vitest';
import type { CounterScope } from '../../../src/store/counters/counters.js';
import {
  PAST_MAX_AGE_MS,
  PastSpendCache,
  pastOf,
  readsPastDays,
  withWindows,
  type PastRead,
} from '../../../src/store/counters/past-spend.js';

const scope: CounterScope = {
  workspaceId: 'ws',
  userId: 'u',
  day: '2026-11-26',
  month: '2026-11',
  weekStart: '2026-11-23',
  monthStart: '2026-11-01',
};
const past = (micros: number) => ({
  week: { workspaceMicros: micros, userMicros: micros / 2 },
  month: { workspaceMicros: 2 * micros, userMicros: micros },
});

/** A read that answers `answer` when released, counting how often it was started. */
function reads() {
  const started: { release: (answer: PastRead) => void }[] = [];
  return {
    started,
    read: () =>
      new Promise<PastRead>((resolve) => {
        started.push({ release: resolve });
      }),
  };
}

describe('past spend remembered', () => {
  it('when the version, the day or a window differs, or the age limit passed, then the past is read again', async () => {
    let now = 0;
    const cache = new PastSpendCache(() => now);
    let count = 0;
    const read = async () => ({ version: '7', past: past(++count * 1_000) });
    expect(await cache.get(scope, '7', read)).toEqual(past(1_000));
    expect(await cache.get(scope, '7', read)).toEqual(past(1_000));
    expect(await cache.get(scope, '8', read)).toEqual(past(2_000));
    expect(await cache.get(scope, null, read)).toEqual(past(3_000));
    expect(await cache.get({ ...scope, day: '2026-11-27' }, '7', read)).toEqual(past(4_000));
    expect(await cache.get({ ...scope, day: '2026-11-27', weekStart: undefined }, '7', read)).toEqual(past(5_000));
    expect(await cache.get({ ...scope, day: '2026-11-27', weekStart: undefined }, '7', read)).toEqual(past(5_000));
    now += PAST_MAX_AGE_MS + 1;
    expect(await cache.get({ ...scope, day: '2026-11-27', weekStart: undefined }, '7', read)).toEqual(past(6_000));
    expect(await cache.get({ ...scope, userId: 'v' }, '7', read)).toEqual(past(7_000));
  });

  it('when decisions miss together at one version, then one read serves them; a decision at another version reads its own', async () => {
    const cache = new PastSpendCache(() => 0);
    const { started, read } = reads();
    const first = cache.get(scope, '7', read);
    const same = cache.get(scope, '7', read);
    const newer = cache.get(scope, '8', read);
    await Promise.resolve();
    expect(started).toHaveLength(1);
    started[0]!.release({ version: '7', past: past(1_000) });
    expect(await first).toEqual(past(1_000));
    expect(await same).toEqual(past(1_000));
    // The read under way answered version 7: the decision that read 8 reads for itself.
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(started).toHaveLength(2);
    started[1]!.release({ version: '8', past: past(2_000) });
    expect(await newer).toEqual(past(2_000));
    expect(await cache.get(scope, '8', read)).toEqual(past(2_000));
    expect(started).toHaveLength(2);
  });

  it('when cleared (Redis failed or closed), then nothing remembered is used, at any version', async () => {
    const cache = new PastSpendCache(() => 0);
    expect(await cache.get(scope, '7', async () => ({ version: '7', past: past(1_000) }))).toEqual(past(1_000));
    cache.clear();
    expect(await cache.get(scope, '7', async () => ({ version: '7', past: past(2_000) }))).toEqual(past(2_000));
  });

  it('when a read fails, then its decision fails and the next one reads again', async () => {
    const cache = new PastSpendCache(() => 0);
    await expect(cache.get(scope, '7', () => Promise.reject(new Error('Redis down')))).rejects.toThrow('Redis down');
    expect(await cache.get(scope, '7', async () => ({ version: '7', past: past(1_000) }))).toEqual(past(1_000));
  });
});

describe('windows from the past and today', () => {
  const today = { workspaceDailySpendMicros: 300, userDailySpendMicros: 30 };

  it('when the records of whole windows are read, then their past is them less today', () => {
    expect(
      pastOf({
        ...today,
        week: { workspaceMicros: 1_300, userMicros: 130 },
        month: { workspaceMicros: 5_300, userMicros: 530 },
      }),
    ).toEqual({
      week: { workspaceMicros: 1_000, userMicros: 100 },
      month: { workspaceMicros: 5_000, userMicros: 500 },
    });
    expect(pastOf(today)).toEqual({});
  });

  it('when windows are added up, then each is its past and today, capped; one without a past is today', () => {
    expect(withWindows(scope, today, past(1_000))).toEqual({
      ...today,
      week: { workspaceMicros: 1_300, userMicros: 530 },
      month: { workspaceMicros: 2_300, userMicros: 1_030 },
    });
    expect(withWindows({ ...scope, monthStart: undefined }, today, null)).toEqual({
      ...today,
      week: { workspaceMicros: 300, userMicros: 30 },
    });
    const huge = { week: { workspaceMicros: 1e15, userMicros: 0 } };
    expect(withWindows({ ...scope, monthStart: undefined }, today, huge).week).toEqual({
      workspaceMicros: 1e15,
      userMicros: 30,
    });
  });

  it('when every window begins today, then there is no past to read', () => {
    expect(readsPastDays(scope)).toBe(true);
    expect(readsPastDays({ ...scope, day: '2026-11-23', monthStart: undefined })).toBe(false);
    expect(readsPastDays({ ...scope, day: '2026-11-01', weekStart: undefined })).toBe(false);
    expect(readsPastDays({ ...scope, weekStart: undefined, monthStart: undefined })).toBe(false);
  });
});
