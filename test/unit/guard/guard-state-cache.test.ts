/**
 * A workspace's and user's rules' state is remembered with the state version it was read at, and
 * used only while that version is current.
 */
import { describe, expect, it } from 'vitest';
import { GuardStateCache } from '../../../src/guard/guard-state-cache.js';
import type { GuardState } from '../../../src/store/workspaces.js';

const state = (name: string) => ({ name }) as unknown as GuardState;

describe('guard state cache', () => {
  it('when a state is remembered at a version, then it serves that version, that workspace and user only', () => {
    const cache = new GuardStateCache();
    const remembered = state('a');
    cache.set('w', 'u', '7', remembered);
    expect(cache.get('w', 'u', '7')).toBe(remembered);
    expect(cache.get('w', 'u', '8')).toBeUndefined();
    expect(cache.get('w', 'v', '7')).toBeUndefined();
    expect(cache.get('x', 'u', '7')).toBeUndefined();
    expect(cache.get('w', 'u', null)).toBeUndefined();
  });

  it('when a state is read again at a new version, then the new one replaces the old', () => {
    const cache = new GuardStateCache();
    cache.set('w', 'u', '7', state('old'));
    const fresh = state('new');
    cache.set('w', 'u', '8', fresh);
    expect(cache.get('w', 'u', '8')).toBe(fresh);
    expect(cache.get('w', 'u', '7')).toBeUndefined();
  });

  it('when no version is known, then nothing is remembered', () => {
    const cache = new GuardStateCache();
    cache.set('w', 'u', null, state('a'));
    expect(cache.get('w', 'u', 'null')).toBeUndefined();
  });

  it('when more users than it keeps are remembered, then the latest still serves', () => {
    const cache = new GuardStateCache();
    for (let i = 0; i < 10_050; i++) cache.set('w', `u${i}`, '1', state(`s${i}`));
    const last = state('last');
    cache.set('w', 'u10050', '1', last);
    expect(cache.get('w', 'u10050', '1')).toBe(last);
  });
});
