/**
 * The HTTP layers a proxied call passes, alone: a `node:http` server that answers a fixed JSON
 * (`bare`), or forwards each request to `<upstream>` through an undici pool with one of undici's
 * APIs and relays the answer. No guard, no record: what `bench/http-layers.ts` measures is what
 * Node's server and undici cost a call, and how much of it a leaner use of them saves.
 *
 * The `net-` modes bound what no HTTP library at all would cost: plain sockets that find a
 * message's end from its `content-length` or its last chunk (enough for the bench's own calls, nothing more: a
 * measuring stub, not an HTTP implementation), answering a fixed JSON (`net-bare`) or passing the
 * request's and the answer's bytes through unchanged (`net-forward`).
 *
 *   node --import tsx bench/http-layers-server.ts <mode> <upstream origin>
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { pipeline } from 'node:stream';
import { Pool, type Dispatcher } from 'undici';
import { HOP_BY_HOP } from './lib/hop-by-hop.js';

const MODES = [
  'bare',
  'bare-chunked',
  'bare-length',
  'request',
  'stream',
  'pipeline',
  'dispatch',
  'dispatch-legacy',
  'net-bare',
  'net-forward',
] as const;
type Mode = (typeof MODES)[number];
const [mode, upstream] = process.argv.slice(2) as [Mode, string | undefined];
if (!MODES.includes(mode)) throw new Error(`usage: http-layers-server.ts <${MODES.join('|')}> <upstream origin>`);
const pool = upstream ? new Pool(upstream, { connections: 256 }) : null;

const NOT_FORWARDED = new Set([...HOP_BY_HOP, 'host', 'content-length']);
const ANSWER = JSON.stringify({
  id: 'chatcmpl-1',
  object: 'chat.completion',
  model: 'gpt-4o-mini',
  choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there, how are you?' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 },
});

const ANSWER_BYTES = Buffer.from(ANSWER);

function forwardable(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined && !NOT_FORWARDED.has(name)) kept[name] = value;
  }
  return kept;
}

/** The same filter on raw header arrays (`[name, value, ...]`), no object either way. */
function forwardableRaw(raw: readonly (string | Buffer)[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = String(raw[i]);
    if (!NOT_FORWARDED.has(name.toLowerCase())) kept.push(name, String(raw[i + 1]));
  }
  return kept;
}

function readBody(req: IncomingMessage, then: (body: Buffer) => void): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => then(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
}

function failed(res: ServerResponse): void {
  if (!res.headersSent) res.writeHead(502).end();
  else res.destroy();
}

const options = (req: IncomingMessage, body: Buffer | null) => ({
  method: 'POST' as const,
  path: req.url ?? '/',
  headers: forwardable(req.headers),
  body,
});

/** A handler in undici's own (legacy) form: raw header arrays both ways, no parsed object. */
class LegacyRelay implements Dispatcher.DispatchHandler {
  constructor(private readonly res: ServerResponse) {}
  onConnect(): void {}
  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true;
    this.res.writeHead(statusCode, forwardableRaw(rawHeaders));
    this.res.on('drain', resume);
    return true;
  }
  onData(chunk: Buffer): boolean {
    return this.res.write(chunk);
  }
  onComplete(): void {
    this.res.end();
  }
  onError(): void {
    failed(this.res);
  }
}

/** A handler in undici 7's form, as src/proxy/forwarder.ts writes it. */
class Relay implements Dispatcher.DispatchHandler {
  constructor(private readonly res: ServerResponse) {}
  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.res.on('drain', () => controller.resume());
  }
  onResponseStart(_c: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[]>) {
    if (statusCode >= 200) this.res.writeHead(statusCode, forwardable(headers));
  }
  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.res.write(chunk)) controller.pause();
  }
  onResponseEnd(): void {
    this.res.end();
  }
  onResponseError(): void {
    failed(this.res);
  }
}

const handlers: Record<
  Exclude<Mode, 'net-bare' | 'net-forward'>,
  (req: IncomingMessage, res: ServerResponse) => void
> = {
  bare: (req, res) =>
    readBody(req, () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(ANSWER) });
      res.end(ANSWER);
    }),
  // An answer relayed from a chunked upstream, written as the relay writes it: its head, its body
  // in one chunk, its end; chunked by Node, or with the length the relay knows once it holds it whole.
  'bare-chunked': (req, res) =>
    readBody(req, () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write(ANSWER_BYTES);
      res.end();
    }),
  'bare-length': (req, res) =>
    readBody(req, () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(ANSWER_BYTES.length) });
      res.write(ANSWER_BYTES);
      res.end();
    }),
  request: (req, res) =>
    readBody(req, (body) => {
      pool!.request(options(req, body)).then(
        (answer) => {
          res.writeHead(answer.statusCode, forwardable(answer.headers));
          pipeline(answer.body, res, () => {});
        },
        () => failed(res),
      );
    }),
  stream: (req, res) =>
    readBody(req, (body) => {
      pool!
        .stream(options(req, body), ({ statusCode, headers }) => {
          res.writeHead(statusCode, forwardable(headers));
          return res;
        })
        .catch(() => failed(res));
    }),
  // The request's body streamed too: nothing read whole.
  pipeline: (req, res) => {
    const duplex = pool!.pipeline({ ...options(req, null), body: undefined }, ({ statusCode, headers, body }) => {
      res.writeHead(statusCode, forwardable(headers));
      return body;
    });
    pipeline(req, duplex, res, () => {});
  },
  dispatch: (req, res) => readBody(req, (body) => pool!.dispatch(options(req, body), new Relay(res))),
  'dispatch-legacy': (req, res) =>
    readBody(req, (body) =>
      pool!.dispatch(
        { method: 'POST', path: req.url ?? '/', headers: forwardableRaw(req.rawHeaders), body },
        new LegacyRelay(res),
      ),
    ),
};

/**
 * Calls `onMessage` with each whole message (head and body) read from `socket`; the bench's
 * messages only (no pipelining, no chunk that looks like the last one).
 */
function onMessages(socket: Socket, onMessage: (message: Buffer) => void): void {
  let pending: Buffer | null = null;
  socket.on('error', () => socket.destroy()); // autocannon closes its connections at the end
  socket.on('data', (chunk: Buffer) => {
    let data = pending ? Buffer.concat([pending, chunk]) : chunk;
    for (;;) {
      const headEnd = data.indexOf('\r\n\r\n');
      if (headEnd === -1) break;
      const head = data.toString('latin1', 0, headEnd);
      let end: number;
      if (/transfer-encoding: *chunked/i.test(head)) {
        const last = data.indexOf('\r\n0\r\n\r\n', headEnd + 2);
        if (last === -1) break;
        end = last + 7;
      } else {
        end = headEnd + 4 + Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (data.length < end) break;
      }
      onMessage(data.subarray(0, end));
      data = data.subarray(end);
    }
    pending = data.length > 0 ? data : null;
  });
}

const NET_ANSWER = Buffer.from(
  `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(ANSWER)}\r\n\r\n${ANSWER}`,
);
const idle: Socket[] = [];
/** Who waits for each upstream connection's answer: one exchange at a time on each. */
const awaiting = new Map<Socket, (answer: Buffer) => void>();

/** Sends `message` upstream on an idle connection (or a new one); `answered` gets the whole answer. */
function upstreamExchange(message: Buffer, answered: (answer: Buffer) => void): void {
  let socket = idle.pop();
  if (!socket) {
    const { hostname, port } = new URL(upstream!);
    const fresh = connect({ host: hostname, port: Number(port), noDelay: true });
    onMessages(fresh, (answer) => {
      const waiting = awaiting.get(fresh)!;
      idle.push(fresh);
      waiting(answer);
    });
    socket = fresh;
  }
  awaiting.set(socket, answered);
  socket.write(message);
}

const server =
  mode === 'net-bare' || mode === 'net-forward'
    ? createNetServer({ noDelay: true }, (socket) =>
        onMessages(socket, (message) => {
          if (mode === 'net-bare') socket.write(NET_ANSWER);
          else upstreamExchange(message, (answer) => socket.write(answer));
        }),
      )
    : createServer({ keepAliveTimeout: 75_000 }, handlers[mode]);
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`READY http://127.0.0.1:${port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
