/**
 * UUIDs as text, written into one buffer and read out as one string. Node's `randomUUID` joins
 * its 16 bytes' hex pairs and dashes one string at a time (~20 short strings an id), and the
 * time-ordered id built on it sliced and joined it again; a proxied call makes two ids (its
 * request's and its step's). The random bits are the operating system's (`randomFillSync`),
 * drawn for many ids at once as Node draws them. Synchronous: one text buffer serves every id.
 */
import { randomFillSync } from 'node:crypto';

/** Ids whose random bytes are drawn at once. */
const BATCH = 256;
const entropy = Buffer.allocUnsafe(16 * BATCH);
let drawn = BATCH;
/** An id's text, written in place: its dashes stay. */
const text = Buffer.from('00000000-0000-0000-0000-000000000000', 'latin1');
const HEX = Buffer.from('0123456789abcdef', 'latin1');
/** Where each of the 16 bytes' two hex digits go in the text. */
const DIGITS_AT = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

/** The offset of 16 fresh random bytes in `entropy`. */
function randomBytes16(): number {
  if (drawn === BATCH) {
    randomFillSync(entropy);
    drawn = 0;
  }
  return 16 * drawn++;
}

function writeByte(index: number, byte: number): void {
  const at = DIGITS_AT[index]!;
  text[at] = HEX[byte >> 4]!;
  text[at + 1] = HEX[byte & 15]!;
}

/** Bytes 6 to 15: random, with the version's nibble and the RFC 9562 variant. */
function writeRandomTail(version: number, from: number): string {
  writeByte(6, (entropy[from + 6]! & 0x0f) | (version << 4));
  writeByte(7, entropy[from + 7]!);
  writeByte(8, (entropy[from + 8]! & 0x3f) | 0x80);
  for (let index = 9; index < 16; index++) writeByte(index, entropy[from + index]!);
  return text.toString('latin1', 0, 36);
}

/** A random UUID (v4), as `crypto.randomUUID` makes. */
export function randomUuid(): string {
  const from = randomBytes16();
  for (let index = 0; index < 6; index++) writeByte(index, entropy[from + index]!);
  return writeRandomTail(4, from);
}

/** A UUIDv7 of `nowMs` (an integer from 0 to 2^48 - 1: the caller checks). */
export function uuidV7Text(nowMs: number): string {
  const high = Math.floor(nowMs / 0x10000);
  writeByte(0, (high >>> 24) & 0xff);
  writeByte(1, (high >>> 16) & 0xff);
  writeByte(2, (high >>> 8) & 0xff);
  writeByte(3, high & 0xff);
  writeByte(4, (nowMs >>> 8) & 0xff);
  writeByte(5, nowMs & 0xff);
  return writeRandomTail(7, randomBytes16());
}
