import { uuidV7Text } from '../uuid-text.js';

/**
 * A UUIDv7 (RFC 9562): the Unix time in milliseconds in its first 48 bits, then the version, 74
 * random bits and the variant. For the ids of runs and steps, the tables that grow with every
 * call: a random (v4) key lands on a random page of the primary key's index, and the first write
 * to a page after a checkpoint logs the whole page. Into an index of 1,000,000 random keys, a v4
 * insert wrote ~5.9 KB of WAL and a v7 one ~970 bytes. Ids made in the same millisecond are in
 * no particular order among themselves.
 *
 * Written by `uuidV7Text` (uuid-text.ts): one string an id, its random bits drawn in batches.
 */
export function timeOrderedId(nowMs: number = Date.now()): string {
  // 48 bits of milliseconds since 1970: anything else (a clock before 1970, an invalid Date's NaN)
  // would make text Postgres refuses as a uuid, or an id that sorts out of its time.
  if (!Number.isSafeInteger(nowMs) || nowMs < 0 || nowMs >= 2 ** 48)
    throw new RangeError(`No UUIDv7 for the time ${nowMs}.`);
  return uuidV7Text(nowMs);
}
