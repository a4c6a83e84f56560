/**
 * The claim an Idempotency-Key makes on a write: bound to the caller's workspace and to this exact
 * request (method, path, body), with the status the route answers, which the record keeps (the
 * service knows no HTTP).
 */
import { fingerprint, type IdempotencyClaim } from '../store/idempotency.js';

export type { IdempotencyClaim };

export function idempotencyClaim(
  workspaceId: string,
  key: string,
  request: { method: string; path: string; body: unknown },
  answerStatus: number,
): IdempotencyClaim {
  return { workspaceId, key, fingerprint: fingerprint(request.method, request.path, request.body), answerStatus };
}
