/**
 * A small HTTP relay on a real port (127.0.0.1, port 0) between a client and a daemon, for tests
 * of what the client does when a connection breaks. It forwards every request untouched and records
 * it; a planned fault makes it lose one answer: the daemon processes the request completely, the
 * relay reads the whole answer, and then destroys the client's socket instead of relaying it. When
 * the daemon cannot be reached, the client's socket is destroyed too, as a dead daemon would.
 */
import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface RelayedRequest {
  method: string;
  path: string;
  idempotencyKey: string | undefined;
  /** What happened to it: relayed, answer lost on the way back, or the daemon was unreachable. */
  outcome: 'relayed' | 'answer-dropped' | 'upstream-unreachable';
  /** Status the daemon answered, when it answered. */
  status: number | undefined;
}

export interface DropPlan {
  method: string;
  /** Matched against the path without the query string. */
  path: RegExp;
  /** How many matching requests lose their answer. @default 1 */
  times?: number;
  /** Called after the daemon answered and before the client's socket is destroyed. */
  beforeDrop?: () => void | Promise<void>;
}

export interface HttpRelay {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  url: string;
  /** Every request received, in arrival order. */
  requests: RelayedRequest[];
  /** Loses the answer of the next matching request(s). */
  dropAnswer(plan: DropPlan): void;
  /** Requests matching a method and a path pattern. */
  requestsTo(method: string, path: RegExp): RelayedRequest[];
  close(): Promise<void>;
}

/** Headers that describe one hop's connection and must not be forwarded as they are. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection']);

export async function startHttpRelay(target: string): Promise<HttpRelay> {
  const upstream = new URL(target);
  const requests: RelayedRequest[] = [];
  const plans: (DropPlan & { remaining: number })[] = [];
  const sockets = new Set<Socket>();

  const server = createServer((req, res) => {
    void relay(req, res);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  async function relay(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const path = req.url ?? '/';
    const record: RelayedRequest = {
      method,
      path,
      idempotencyKey: header(req.headers, 'idempotency-key'),
      outcome: 'relayed',
      status: undefined,
    };
    requests.push(record);
    const body = await readAll(req);
    const plan = plans.find((p) => p.remaining > 0 && p.method === method && p.path.test(path.split('?')[0]!));
    if (plan) plan.remaining--;

    let answer: { status: number; headers: IncomingHttpHeaders; body: Buffer };
    try {
      answer = await forward(method, path, req.headers, body);
    } catch {
      record.outcome = 'upstream-unreachable';
      req.socket.destroy();
      return;
    }
    record.status = answer.status;
    if (plan) {
      record.outcome = 'answer-dropped';
      await plan.beforeDrop?.();
      req.socket.destroy();
      return;
    }
    const headers = Object.fromEntries(Object.entries(answer.headers).filter(([name]) => !HOP_BY_HOP.has(name)));
    res.writeHead(answer.status, { ...headers, 'content-length': String(answer.body.length) });
    res.end(answer.body);
  }

  function forward(method: string, path: string, incoming: IncomingHttpHeaders, body: Buffer) {
    const headers = Object.fromEntries(Object.entries(incoming).filter(([name]) => !HOP_BY_HOP.has(name)));
    headers['host'] = upstream.host;
    headers['content-length'] = String(body.length);
    return new Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
      // A fresh connection per request (agent: false): a restarted daemon is reached at once.
      const out = httpRequest(
        { host: upstream.hostname, port: upstream.port, method, path, headers, agent: false },
        (answer) => {
          readAll(answer).then(
            (data) => resolve({ status: answer.statusCode ?? 502, headers: answer.headers, body: data }),
            reject,
          );
        },
      );
      out.on('error', reject);
      out.end(body);
    });
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    dropAnswer(plan) {
      plans.push({ ...plan, remaining: plan.times ?? 1 });
    },
    requestsTo(method, path) {
      return requests.filter((r) => r.method === method && path.test(r.path.split('?')[0]!));
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function readAll(stream: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => resolve(Buffer.concat(chunks)));
    stream.on('error', reject);
  });
}
