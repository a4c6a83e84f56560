/**
 * The failed-authentication limit limits the failures, not the address: a credential that
 * authenticated is served from an address over its failures, one not seen yet may be tried once a
 * second, and a credential that failed is no longer one that authenticated.
 */
import { describe, expect, it } from 'vitest';
import { FailedAuthLimiter } from '../../../src/api/failed-auth-limit.js';

const ADDRESS = '203.0.113.7';

function limiter() {
  let now = 1_000_000;
  const limit = new FailedAuthLimiter(3, { windowMs: 60_000, now: () => now });
  return { limit, advance: (ms: number) => (now += ms) };
}

describe('the failed-authentication limit', () => {
  it('when an address is over its failures, then a credential that authenticated is served and others wait', () => {
    const { limit } = limiter();
    limit.succeeded('lg_good');
    for (let i = 0; i < 3; i++) limit.failed(ADDRESS, `lg_forged_${i}`);
    expect(limit.blockedFor(ADDRESS, 'lg_good')).toBe(0);
    expect(limit.blockedFor(ADDRESS, 'lg_forged_3')).toBe(1_000);
    expect(limit.blockedFor(ADDRESS, null)).toBe(60_000);
    // Another address is not affected.
    expect(limit.blockedFor('198.51.100.1', 'lg_forged_4')).toBe(0);
  });

  it('when a second has passed since the limit was reached, then one credential not seen is tried, and the next waits a second', () => {
    const { limit, advance } = limiter();
    for (let i = 0; i < 3; i++) limit.failed(ADDRESS, `lg_forged_${i}`);
    advance(1_000);
    expect(limit.blockedFor(ADDRESS, 'lg_new')).toBe(0);
    expect(limit.blockedFor(ADDRESS, 'lg_other')).toBe(1_000);
    advance(400);
    expect(limit.blockedFor(ADDRESS, 'lg_other')).toBe(600);
    // Near the window's end, the wait is the window's.
    advance(58_200);
    expect(limit.blockedFor(ADDRESS, 'lg_other')).toBe(0);
    expect(limit.blockedFor(ADDRESS, 'lg_more')).toBe(400);
    advance(400);
    expect(limit.blockedFor(ADDRESS, 'lg_more')).toBe(0);
  });

  it('when a credential that authenticated fails (revoked), then it waits like any other', () => {
    const { limit } = limiter();
    limit.succeeded('lg_revoked');
    for (let i = 0; i < 2; i++) limit.failed(ADDRESS, `lg_forged_${i}`);
    limit.failed(ADDRESS, 'lg_revoked');
    expect(limit.blockedFor(ADDRESS, 'lg_revoked')).toBe(1_000);
  });

  it('when a credential authenticated longer ago than it is remembered, then it waits like any other', () => {
    let now = 0;
    const limit = new FailedAuthLimiter(1, { knownMs: 10_000, windowMs: 60_000, now: () => now });
    limit.succeeded('lg_old');
    now += 10_000;
    limit.failed(ADDRESS, 'lg_forged');
    expect(limit.blockedFor(ADDRESS, 'lg_old')).toBe(1_000);
  });

  it('when more credentials authenticate than are remembered, then the least recently used are forgotten', () => {
    const small = new FailedAuthLimiter(1, { maxKnown: 2, now: () => 0 });
    small.succeeded('a');
    small.succeeded('b');
    small.succeeded('a');
    small.succeeded('c');
    small.failed(ADDRESS, 'x');
    expect(small.blockedFor(ADDRESS, 'a')).toBe(0);
    expect(small.blockedFor(ADDRESS, 'c')).toBe(0);
    expect(small.blockedFor(ADDRESS, 'b')).toBeGreaterThan(0);
  });
});
