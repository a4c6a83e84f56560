/**
 * Which new passwords are refused, as NIST SP 800-63B (5.1.1.2) asks: the commonly used and
 * breached ones, and those that are one character repeated or only whitespace. No composition
 * rules (a digit, a capital): they make passwords harder to remember, not to guess.
 *
 * The list is zxcvbn's (`@zxcvbn-ts/language-common`, MIT): ~49,000 passwords ranked by how often
 * they appeared in public breach corpora, of which those long enough to be accepted at all (8
 * characters, the contract's minimum) are kept. Loaded on the first password set, not at start:
 * a daemon that never registers an account never holds it.
 */
import { ApiError } from '../errors.js';

/** The shortest password accepted (the contract's `password (>= 8 chars)`). */
const MIN_LENGTH = 8;

let common: Promise<Set<string>> | null = null;

function commonPasswords(): Promise<Set<string>> {
  common ??= import('@zxcvbn-ts/language-common').then(
    ({ dictionary }) => new Set(dictionary['passwords-common'].filter((password) => password.length >= MIN_LENGTH)),
  );
  return common;
}

/** Why `password` may not be used, or null when it may. Compared as written, and in lower case. */
export async function weakPasswordReason(password: string): Promise<string | null> {
  if (password.trim() === '') return 'must not be only whitespace';
  const characters = [...password]; // code points: an emoji is one character, not two halves
  if (characters.every((char) => char === characters[0])) return 'must not be one character repeated';
  const list = await commonPasswords();
  if (list.has(password) || list.has(password.toLowerCase()))
    return 'is one of the most commonly used passwords (from public breaches): choose another';
  return null;
}

/** Refuses a new password that `weakPasswordReason` refuses: 422 naming `field` (e.g. `body.password`). */
export async function refuseWeakPassword(password: string, field: string): Promise<void> {
  const reason = await weakPasswordReason(password);
  if (reason !== null)
    throw new ApiError('VALIDATION_FAILED', `The password ${reason}.`, { errors: [{ path: field, message: reason }] });
}
