/**
 * A real webhook receiver on loopback, for tests: records every request, verifies its Standard
 * Webhooks signature with a verifier written here from the spec (not runguard's own signing
 * code), and answers as told: 200, a failure status, or never (a hung receiver).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface Received {
  /** The request's path: each endpoint of a test has its own. */
  path: string;
  id: string;
  timestamp: string;
  signature: string;
  body: string;
  json: any;
  /** The signature verified against the secret known when it arrived. */
  verified: boolean;
}

export type ReceiverMode = { status: number; headers?: Record<string, string> } | 'hang';

/**
 * The spec, by hand: the secret is `whsec_` + base64 key; the signed content is
 * `${id}.${timestamp}.${body}`; the header holds space-separated `v1,<base64 HMAC-SHA256>`
 * signatures, any of which may match; the timestamp must be within 5 minutes of now.
 */
export function verifyStandardWebhook(
  secret: string,
  headers: { id: string; timestamp: string; signature: string },
  body: string,
): boolean {
  if (!secret.startsWith('whsec_')) return false;
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const seconds = Number(headers.timestamp);
  if (!Number.isInteger(seconds) || Math.abs(Date.now() / 1000 - seconds) > 300) return false;
  const expected = createHmac('sha256', key).update(`${headers.id}.${headers.timestamp}.${body}`).digest();
  return headers.signature.split(' ').some((candidate) => {
    const [version, value] = candidate.split(',', 2);
    if (version !== 'v1' || !value) return false;
    const given = Buffer.from(value, 'base64');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}

export interface Receiver {
  url: string;
  received: Received[];
  /** Secrets by path (`/` when the endpoint was created at the bare URL). */
  secrets: Map<string, string>;
  mode: ReceiverMode;
  /** Requests held open by a hung receiver. */
  hung: number;
  /** Distinct events (by webhook-id) in the order of their first arrival. */
  unique(): Received[];
  waitFor(predicate: (unique: Received[]) => boolean, timeoutMs?: number): Promise<Received[]>;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const hung: ServerResponse[] = [];
  const receiver: Receiver = {
    url: '',
    received: [],
    secrets: new Map(),
    mode: { status: 200 },
    get hung() {
      return hung.length;
    },
    unique() {
      const seen = new Set<string>();
      return receiver.received.filter((r) => (seen.has(r.id) ? false : (seen.add(r.id), true)));
    },
    async waitFor(predicate, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(receiver.unique())) {
        if (Date.now() > deadline) {
          throw new Error(
            `receiver: condition not met in ${timeoutMs} ms; got ${JSON.stringify(receiver.unique().map((r) => r.json?.type))}`,
          );
        }
        await sleep(50);
      }
      return receiver.unique();
    },
    async close() {
      for (const res of hung) res.destroy();
      server.closeAllConnections();
      await new Promise((done) => server.close(done));
    },
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const mode = receiver.mode;
      if (mode === 'hang') {
        hung.push(res);
        return;
      }
      const body = Buffer.concat(chunks).toString('utf8');
      const headers = {
        id: String(req.headers['webhook-id'] ?? ''),
        timestamp: String(req.headers['webhook-timestamp'] ?? ''),
        signature: String(req.headers['webhook-signature'] ?? ''),
      };
      const secret = receiver.secrets.get(req.url ?? '/') ?? '';
      let json: unknown = null;
      try {
        json = JSON.parse(body);
      } catch {
        /* kept as text */
      }
      // Only answered deliveries count as received: a failure status is a delivery not taken.
      if (mode.status >= 200 && mode.status < 300) {
        receiver.received.push({
          path: req.url ?? '/',
          ...headers,
          body,
          json,
          verified: verifyStandardWebhook(secret, headers, body),
        });
      }
      res.writeHead(mode.status, mode.headers ?? {}).end('ok');
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return receiver;
}
