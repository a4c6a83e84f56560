import { describe, expect, it } from 'vitest';
import {
  backoffDelay,
  isRetryableStatus,
  MAX_RETRY_AFTER_MS,
  parseRetryAfter,
  retryDelay,
} from '../../../clients/typescript/src/retry-policy.js';

const headers = (init: Record<string, string>): Headers => new Headers(init);

describe('retry policy', () => {
  it.each([
    [408, true],
    [429, true],
    [500, true],
    [502, true],
    [503, true],
    [504, true],
    [400, false],
    [401, false],
    [403, false],
    [404, false],
    [409, false],
    [413, false],
    [422, false],
  ])('when the status is %i, then retryable is %s', (status, expected) => {
    expect(isRetryableStatus(status)).toBe(expected);
  });

  it('when no jitter applies, then backoff doubles from 0.5 s and caps at 8 s', () => {
    const noJitter = (): number => 0;
    expect([0, 1, 2, 3, 4, 5, 10].map((i) => backoffDelay(i, noJitter))).toEqual([
      500, 1000, 2000, 4000, 8000, 8000, 8000,
    ]);
  });

  it('when jitter is at its maximum, then at most 25 % is taken off', () => {
    expect(backoffDelay(0, () => 1)).toBe(375);
    expect(backoffDelay(4, () => 0.5)).toBe(7000);
  });

  it('when Retry-After is delta-seconds, then it is used in ms', () => {
    expect(parseRetryAfter(headers({ 'retry-after': '2' }))).toBe(2000);
    expect(parseRetryAfter(headers({ 'retry-after': '0' }))).toBe(0);
    expect(parseRetryAfter(headers({ 'retry-after': '0.25' }))).toBe(250);
  });

  it('when Retry-After is an HTTP date, then the time until it is used', () => {
    const now = Date.parse('2025-01-01T00:00:00Z');
    expect(parseRetryAfter(headers({ 'retry-after': 'Wed, 01 Jan 2025 00:00:03 GMT' }), now)).toBe(3000);
    expect(parseRetryAfter(headers({ 'retry-after': 'Tue, 31 Dec 2024 23:59:00 GMT' }), now)).toBe(0);
  });

  it('when Retry-After asks for too long, then it is capped', () => {
    expect(parseRetryAfter(headers({ 'retry-after': '86400' }))).toBe(MAX_RETRY_AFTER_MS);
    expect(parseRetryAfter(headers({ 'retry-after': 'Fri, 01 Jan 2100 00:00:00 GMT' }))).toBe(MAX_RETRY_AFTER_MS);
  });

  it('when retry-after-ms is present, then it takes precedence', () => {
    expect(parseRetryAfter(headers({ 'retry-after-ms': '150', 'retry-after': '5' }))).toBe(150);
  });

  it.each<Record<string, string>>([{}, { 'retry-after': 'soon' }, { 'retry-after': '-3' }, { 'retry-after-ms': 'x' }])(
    'when the headers are %o, then there is no server hint and backoff applies',
    (init) => {
      expect(parseRetryAfter(headers(init))).toBeUndefined();
      expect(retryDelay(1, headers(init), () => 0)).toBe(1000);
    },
  );
});
