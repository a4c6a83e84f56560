/**
 * What a proxied call asks for, read from its body: the step to check (type, model, the audit
 * summary kept as its input) and the bytes to forward (the client's own, or rewritten by the
 * provider's adapter, e.g. to ask a stream for its usage).
 */
import { ApiError } from '../errors.js';
import type { StepInput } from '../guard/step-input.js';
import { auditSummary, type AuditOptions } from './audit-summary.js';
import { asObject, MAX_BODY_DEPTH, nestsDeeperThan, parseJson } from './json-fields.js';
import { rewrittenBytes } from './json-rewrite.js';
import { requestBounds } from './request-bounds.js';
import type { Provider } from './provider-registry.js';

export interface CallInput {
  stepInput: Omit<StepInput, 'sequence'>;
  /** The body to send upstream; made only once the step is allowed. */
  bytesToForward(): Buffer | null;
}

/** The first byte of a body that is not JSON's insignificant whitespace (RFC 8259). */
function firstSignificantByte(body: Buffer): number | undefined {
  let at = 0;
  while (at < body.length && (body[at] === 0x20 || body[at] === 0x09 || body[at] === 0x0a || body[at] === 0x0d)) at++;
  return body[at];
}

/**
 * The body of a call, parsed: a JSON object whatever its content type says (`fetch` sends a
 * string body as text/plain, and a form can post JSON as text/plain too), else `undefined`
 * (the upstream judges it). On a model-call endpoint a body that is not a JSON object is refused:
 * forwarded unread, its model and cost would go unseen by every budget.
 */
export function parseBody(body: Buffer | undefined, modelCall: boolean): unknown {
  if (!body || body.length === 0) return undefined;
  // Only an object names a model; anything else (a file upload, a form) is not parsed at all.
  const parsed = firstSignificantByte(body) === 0x7b ? parseJson(body.toString('utf8')) : undefined;
  if (modelCall && asObject(parsed) === undefined)
    throw new ApiError(
      'INVALID_JSON',
      "A model call's body must be a JSON object, whatever its Content-Type says: runguard reads it to check the call.",
    );
  return parsed;
}

export function callInput(
  provider: Provider,
  request: { method: string; path: string; body: unknown },
  audit: AuditOptions,
): CallInput {
  const { method, path } = request;
  const raw = Buffer.isBuffer(request.body) ? request.body : undefined;
  const parsed = parseBody(raw, provider.adapter.isModelCall(path));
  if (nestsDeeperThan(parsed, MAX_BODY_DEPTH))
    throw new ApiError('BAD_REQUEST', `The request body nests deeper than ${MAX_BODY_DEPTH} levels.`);
  const inspected = provider.adapter.inspectRequest(path, parsed);
  const inputData = auditSummary(
    { provider: provider.name, method, path, inspected, body: parsed, bodyBytes: raw?.length ?? 0 },
    audit,
  );
  return {
    stepInput: {
      type: 'MODEL_CALL',
      model: inspected.model === null ? null : inspected.model.slice(0, 256),
      input_data: inputData,
      bounds: requestBounds(path, parsed, raw?.length ?? 0),
      // This daemon records the result: the step is its own until then (crash recovery).
      forwarded: true,
      // The loop rule compares whole requests: the summary above is alike for different prompts.
      loopInput: parsed,
    },
    bytesToForward: () =>
      inspected.rewrittenBody === undefined
        ? (raw ?? null)
        : rewrittenBytes(raw ?? Buffer.alloc(0), parsed, inspected.rewrittenBody),
  };
}
