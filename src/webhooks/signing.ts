/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): the secret is `whsec_` and the
 * base64 of its key; the signature is `v1,` and the base64 of HMAC-SHA256 over
 * `<webhook-id>.<webhook-timestamp>.<body>`, so receivers can use any existing verifier.
 */
import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';

/** A new secret: 32 random bytes, as `whsec_<base64>`. */
export function generateSecret(): string {
  return `${PREFIX}${randomBytes(32).toString('base64')}`;
}

export function signatureHeader(secret: string, id: string, timestampSeconds: number, body: string): string {
  const key = Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
  const mac = createHmac('sha256', key).update(`${id}.${timestampSeconds}.${body}`).digest('base64');
  return `v1,${mac}`;
}
