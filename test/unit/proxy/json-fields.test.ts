/** How deep a parsed body nests, the walk every proxied call's body takes before it is read. */
import { describe, expect, it } from 'vitest';
import { nestsDeeperThan } from '../../../src/proxy/json-fields.js';

/** `levels` containers, one inside the other, alternating objects and arrays. */
function nested(levels: number): unknown {
  let value: unknown = 'leaf';
  for (let i = 0; i < levels; i++) value = i % 2 === 0 ? { a: value } : [1, value];
  return value;
}

describe('nestsDeeperThan', () => {
  it('when containers nest max levels or fewer, then no; one more, then yes', () => {
    expect(nestsDeeperThan(nested(3), 3)).toBe(false);
    expect(nestsDeeperThan(nested(4), 3)).toBe(true);
    expect(nestsDeeperThan(nested(128), 128)).toBe(false);
    expect(nestsDeeperThan(nested(129), 128)).toBe(true);
  });

  it('when the deep branch is not the first, then it is still found', () => {
    expect(nestsDeeperThan({ a: 1, b: [], c: { d: nested(3) } }, 4)).toBe(true);
    expect(nestsDeeperThan([null, 'x', { y: [nested(1)] }], 4)).toBe(false);
    expect(nestsDeeperThan([null, 'x', { y: [nested(2)] }], 4)).toBe(true);
  });

  it('when the value is not a container, then it nests nothing', () => {
    for (const value of [undefined, null, 0, 'text', true]) expect(nestsDeeperThan(value, 0)).toBe(false);
    expect(nestsDeeperThan({}, 0)).toBe(true);
  });

  it('when a key is named __proto__ in the JSON, then its value is walked as any other', () => {
    expect(nestsDeeperThan(JSON.parse('{"__proto__":{"a":{"b":1}}}'), 2)).toBe(true);
  });
});
