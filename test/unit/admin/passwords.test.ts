/** Password hashes, and the decoy an unknown email is verified against. */
import { describe, expect, it } from 'vitest';
import { decoyHash, hashPassword, verifyPassword } from '../../../src/admin/passwords.js';

const COST = 2 ** 10;

describe('passwords', () => {
  it('when a password is hashed, then only that password verifies', async () => {
    const stored = await hashPassword('correct horse', COST);
    expect(await verifyPassword('correct horse', stored)).toBe(true);
    expect(await verifyPassword('wrong horse', stored)).toBe(false);
  });

  it('when a decoy is made, then it has the shape and cost of a real hash, differs each time, and matches nothing', async () => {
    const real = (await hashPassword('x', COST)).split('$');
    const decoy = decoyHash(COST).split('$');
    expect(decoy.slice(0, 4)).toEqual(real.slice(0, 4));
    expect(decoy.map((part) => part.length)).toEqual(real.map((part) => part.length));
    expect(decoyHash(COST)).not.toBe(decoyHash(COST));
    for (const password of ['', 'x', 'decoy password, never matches'])
      expect(await verifyPassword(password, decoy.join('$'))).toBe(false);
  });
});
