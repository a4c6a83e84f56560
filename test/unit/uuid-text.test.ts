import { describe, expect, it } from 'vitest';
import { randomUuid, uuidV7Text } from '../../src/uuid-text.js';

const V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('uuid text', () => {
  it('when many random ids are made (past one batch of entropy), then each is a UUIDv4 and none repeats', () => {
    const ids = Array.from({ length: 5_000 }, () => randomUuid());
    for (const id of ids) expect(id).toMatch(V4);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('when random ids are made, then every hex digit comes up in their random part about as often as any other', () => {
    const counts = new Map<string, number>();
    for (let i = 0; i < 4_000; i++)
      for (const digit of randomUuid().slice(24)) counts.set(digit, (counts.get(digit) ?? 0) + 1);
    // 48,000 digits: 3,000 each expected, a standard deviation of ~53; a fair source stays within 300.
    expect([...counts.keys()].sort().join('')).toBe('0123456789abcdef');
    for (const count of counts.values()) expect(Math.abs(count - 3_000)).toBeLessThan(300);
  });

  it('when a time above 32 bits is given, then its first 48 bits are that time', () => {
    for (const ms of [2 ** 32 - 1, 2 ** 32, 2 ** 40 + 12_345, 2 ** 48 - 1]) {
      const id = uuidV7Text(ms);
      expect(parseInt(id.slice(0, 8) + id.slice(9, 13), 16)).toBe(ms);
      expect(id[14]).toBe('7');
    }
  });
});
