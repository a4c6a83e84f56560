/** `key=value` pairs as run tags: the proxy's header and exec's `--tag`, with the API's bounds. */
import { describe, expect, it } from 'vitest';
import { tagsFromHeader, tagsFromPairs } from '../../../src/contract/tag-pairs.js';

describe('tag pairs', () => {
  it('when pairs are well formed, then they are the tags, split at the first =, trimmed', () => {
    expect(tagsFromPairs(['project=search', ' team = growth ', 'url=a=b'])).toEqual({
      tags: { project: 'search', team: 'growth', url: 'a=b' },
    });
    expect(tagsFromPairs([])).toEqual({ tags: {} });
    // Without percent-decoding (the CLI), a % is a character like any other.
    expect(tagsFromPairs(['rate=50%'])).toEqual({ tags: { rate: '50%' } });
  });

  it('when the header is read, then commas separate pairs and %XX decodes a value', () => {
    expect(tagsFromHeader('project=search,team=growth, note=a%2Cb')).toEqual({
      tags: { project: 'search', team: 'growth', note: 'a,b' },
    });
    expect(tagsFromHeader('emoji=%F0%9F%98%80')).toEqual({ tags: { emoji: '😀' } });
  });

  it.each([
    [['project'], /not key=value/],
    [['Project=x'], /not a tag key/],
    [['=x'], /not a tag key/],
    [[`${'k'.repeat(65)}=x`], /not a tag key/],
    [['a=1', 'a=2'], /given twice/],
    [['a='], /1 to 128 characters/],
    [[`a=${'x'.repeat(129)}`], /1 to 128 characters/],
    [['a=x\u0007y'], /no control characters/],
    [Array.from({ length: 17 }, (_, i) => `k${i}=v`), /at most 16 tags/],
  ])('when the pairs are %j, then the problem says why', (pairs, problem) => {
    const read = tagsFromPairs(pairs);
    expect('problem' in read && read.problem).toMatch(problem);
  });

  it('when a header value has a malformed escape or decodes to a control character, then it is a problem', () => {
    expect(tagsFromHeader('a=%E0%A4%A')).toEqual({ problem: 'the value of "a" has a malformed %-escape' });
    expect(tagsFromHeader('a=%0A')).toMatchObject({ problem: expect.stringMatching(/control characters/) });
  });

  it('when the bounds are met exactly, then the tags are taken', () => {
    const sixteen = Array.from({ length: 16 }, (_, i) => `k${i}=v`);
    expect(Object.keys((tagsFromPairs(sixteen) as { tags: object }).tags)).toHaveLength(16);
    expect(tagsFromPairs([`${'k'.repeat(64)}=${'😀'.repeat(128)}`])).toMatchObject({ tags: expect.any(Object) });
  });
});
