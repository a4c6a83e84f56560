/**
 * Password hashing with scrypt (node:crypto). OWASP's parameters: N = 2^17, r = 8, p = 1. The cost
 * is stored with each hash, so it can be raised later without breaking older hashes.
 */
import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

const KEY_LENGTH = 32;
export const DEFAULT_SCRYPT_COST = 2 ** 17;

function derive(password: string, salt: Buffer, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFKC'), salt, KEY_LENGTH, options, (error, key) =>
      error ? reject(error) : resolve(key),
    );
  });
}

const optionsFor = (cost: number, blockSize: number, parallelization: number): ScryptOptions => ({
  N: cost,
  r: blockSize,
  p: parallelization,
  maxmem: 256 * cost * blockSize + 1024 * 1024,
});

/** `scrypt$N$r$p$salt$hash`, salt and hash in base64url. */
export async function hashPassword(password: string, cost = DEFAULT_SCRYPT_COST): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, optionsFor(cost, 8, 1));
  return ['scrypt', cost, 8, 1, salt.toString('base64url'), key.toString('base64url')].join('$');
}

/**
 * A well-formed hash of the given cost that no password matches (its key is random bytes, not
 * derived): verifying against it takes as long as against a real one, and making it costs nothing.
 * Deriving one instead would hold scrypt's 128 MB (N = 2^17, r = 8) at every daemon start.
 */
export function decoyHash(cost = DEFAULT_SCRYPT_COST): string {
  return [
    'scrypt',
    cost,
    8,
    1,
    randomBytes(16).toString('base64url'),
    randomBytes(KEY_LENGTH).toString('base64url'),
  ].join('$');
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, cost, blockSize, parallelization, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64url');
  const key = await derive(
    password,
    Buffer.from(salt, 'base64url'),
    optionsFor(Number(cost), Number(blockSize), Number(parallelization)),
  );
  return key.length === expected.length && timingSafeEqual(key, expected);
}
