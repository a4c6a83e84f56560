/**
 * One delivery attempt: checks where it goes, connects to the checked address only, sends the
 * signed body, reads at most a little of the answer, and reports what happened. Knows nothing of
 * deliveries, retries or the database.
 */
import type { Agent } from 'undici';
import { checkUrlForm, OutboundRefused, resolveAllowed, type OutboundPolicy } from './outbound-policy.js';
import { signatureHeader } from './signing.js';

/** What is kept of a receiver's answer (for the delivery log); the rest is not read. */
const RESPONSE_LIMIT_BYTES = 4_096;

export interface Attempt {
  url: string;
  secret: string;
  messageId: string;
  body: string;
  timestampSeconds: number;
  userAgent: string;
}

export interface AttemptResult {
  statusCode: number | null;
  latencyMs: number;
  /** Why it failed, for the delivery log; null for a 2xx. */
  error: string | null;
  retryAfter: string | null;
  /** The policy refused the target: no connection was made. */
  refused: boolean;
}

export async function attemptDelivery(
  attempt: Attempt,
  policy: OutboundPolicy,
  timeoutMs: number,
  /** Calls the attempt off before its timeout (the daemon stopping). */
  cancel?: AbortSignal,
): Promise<AttemptResult> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  let agent: Agent | null = null;
  try {
    const url = checkUrlForm(attempt.url);
    const target = await resolveAllowed(url, policy);
    // Loaded at the first delivery, not at start: a daemon that sends no webhook (and the proxy)
    // does not hold all of undici in its heap (~3 MB).
    const { Agent, request } = await import('undici');
    // Pinned: the connection goes to the address just checked, whatever the name resolves to now.
    // TLS still verifies the certificate against the URL's host name.
    agent = new Agent({
      connect: {
        timeout: timeoutMs,
        lookup: (_host, options, callback) => {
          if ((options as { all?: boolean }).all)
            callback(null, [{ address: target.address, family: target.family }] as never);
          else callback(null, target.address, target.family);
        },
      },
      pipelining: 0,
    });
    const response = await request(url, {
      dispatcher: agent,
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': attempt.userAgent,
        'webhook-id': attempt.messageId,
        'webhook-timestamp': String(attempt.timestampSeconds),
        'webhook-signature': signatureHeader(attempt.secret, attempt.messageId, attempt.timestampSeconds, attempt.body),
      },
      body: attempt.body,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: cancel ? AbortSignal.any([AbortSignal.timeout(timeoutMs), cancel]) : AbortSignal.timeout(timeoutMs),
    });
    const excerpt = await readLimited(response.body);
    const ok = response.statusCode >= 200 && response.statusCode < 300;
    const retryAfter = response.headers['retry-after'];
    return {
      statusCode: response.statusCode,
      latencyMs: elapsed(),
      error: ok ? null : `HTTP ${response.statusCode}${excerpt ? `: ${excerpt}` : ''}`,
      retryAfter: (Array.isArray(retryAfter) ? retryAfter[0] : retryAfter) ?? null,
      refused: false,
    };
  } catch (error) {
    const refused = error instanceof OutboundRefused;
    return { statusCode: null, latencyMs: elapsed(), error: describe(error), retryAfter: null, refused };
  } finally {
    // One connection per attempt: a pinned address is this attempt's alone.
    void agent?.destroy().catch(() => {});
  }
}

/** Up to the limit, as text; the rest of the body is dropped, not read. */
async function readLimited(body: AsyncIterable<Buffer> & { destroy(): unknown }): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      chunks.push(chunk);
      size += chunk.length;
      if (size >= RESPONSE_LIMIT_BYTES) break;
    }
  } catch {
    /* a body cut short says nothing more */
  } finally {
    body.destroy();
  }
  return Buffer.concat(chunks)
    .subarray(0, RESPONSE_LIMIT_BYTES)
    .toString('utf8')
    .replace(/\s+/g, ' ')
    .trim()
    .slice(0, 500);
}

function describe(error: unknown): string {
  const failure = error as {
    name?: string;
    code?: string;
    message?: string;
    cause?: { code?: string; message?: string };
  };
  if (
    failure?.name === 'TimeoutError' ||
    failure?.name === 'AbortError' ||
    failure?.code === 'UND_ERR_HEADERS_TIMEOUT' ||
    failure?.code === 'UND_ERR_BODY_TIMEOUT'
  ) {
    return 'timed out';
  }
  const code = failure?.code ?? failure?.cause?.code;
  const message = failure?.message ?? String(error);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}
