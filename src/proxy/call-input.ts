/**
 * What a proxied call asks for, read from its body: the step to check (type, model, the audit
 * summary kept as its input) and the bytes to forward (the client's own, or rewritten by the
 * provider's adapter, e.g. to ask a stream for its usage).
 */
import { ApiError } from '../errors.js';
import type { StepInput } from '../service/step-input.js';
import { auditSummary, type AuditOptions } from './audit-summary.js';
import { MAX_BODY_DEPTH, nestsDeeperThan } from './json-fields.js';
import { rewrittenBytes } from './json-rewrite.js';
import { requestBounds } from './request-bounds.js';
import type { Provider } from './provider-registry.js';

export interface CallInput {
  stepInput: Omit<StepInput, 'sequence'>;
  /** The body to send upstream; made only once the step is allowed. */
  bytesToForward(): Buffer | null;
}

/** The body as JSON when it says it is JSON; undefined otherwise (the upstream judges it). */
export function parseBody(body: Buffer | undefined, contentType: string | undefined): unknown {
  if (!body || body.length === 0) return undefined;
  if (contentType && !/json/i.test(contentType)) return undefined;
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return undefined; // not ours to refuse: the upstream answers a malformed body
  }
}

export function callInput(
  provider: Provider,
  request: { method: string; path: string; contentType: string | undefined; body: unknown },
  audit: AuditOptions,
): CallInput {
  const { method, path } = request;
  const raw = Buffer.isBuffer(request.body) ? request.body : undefined;
  const parsed = parseBody(raw, request.contentType);
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
