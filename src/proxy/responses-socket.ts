/**
 * The Responses API over WebSocket (`GET .../v1/responses` with `Upgrade: websocket`), relayed
 * to the provider's own WebSocket: one agent socket, one provider socket. Each `response.create`
 * the agent sends is a MODEL_CALL step of the run, decided (and its record durable) before the
 * event goes upstream; a denied one is answered on the socket with an `error` event in the
 * provider's shape, and nothing goes upstream. An allowed one is priced from its
 * `response.completed` (or `.incomplete`), and ends FAILED on `response.failed`, an `error`
 * event, or a socket that closed first. Every other event passes through as it is.
 *
 * Bounds: the upgrade is authenticated (token or key) before any upstream connection; a message
 * over `maxMessageBytes` is answered with an `error` event and closes the socket with 1009, one
 * that is not a JSON object with 1007; a socket silent both ways for `idleMs` is closed (1001).
 */
import { upstreamFailure } from './forwarder.js';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyBaseLogger, FastifyError } from 'fastify';
import WebSocket, { WebSocketServer, type RawData } from 'ws';
import { NO_TOKENS, tokensFromUsage } from '../contract/provider-usage.js';
import { toApiError } from '../api/error-handler.js';
import { isApiError } from '../errors.js';
import type { AuditOptions } from './audit-summary.js';
import { checkCall, type StepRecorder } from './call-check.js';
import { callInput } from './call-input.js';
import { resultRecorder, type RecordResult, type ResultWriter } from './call-result.js';
import type { Target } from './call-target.js';
import type { CallsInProgress } from './calls-in-progress.js';
import { upstreamHeaders } from './forwarder.js';
import { traceDenial, tracedResult } from './call-telemetry.js';
import { traceparentOf, type RunTelemetry } from '../telemetry/telemetry.js';
import type { Provider } from './provider-registry.js';
import { ProxyRefusal } from './proxy-refusal.js';
import { asObject, endpointPath, modelNamed, parseJson } from './json-fields.js';

/** Whether an upgrade to `path` on `provider` is one the proxy relays. */
export function relaysWebSocket(provider: Provider, path: string): boolean {
  return provider.type === 'openai' && endpointPath(path).endsWith('/responses');
}

export interface SocketRelayOptions {
  guard: StepRecorder & ResultWriter;
  calls: CallsInProgress;
  audit: AuditOptions;
  /** Largest client message, in bytes (the proxy's body limit). */
  maxMessageBytes: number;
  /** Longest silence, both ways, before the sockets are closed. */
  idleMs: number;
  log: FastifyBaseLogger;
  /** Where each `response.create`'s step is traced. */
  telemetry: RunTelemetry;
}

/** The events of an answer that end a response: its result is read from them. */
const ENDING_EVENT = /"type"\s*:\s*"(response\.(?:completed|incomplete|failed)|error)"/;

/** The WebSocket handshake's own headers, which the upstream connection makes anew. */
const HANDSHAKE = /^sec-websocket-/;

/**
 * How long a shutdown waits for a socket's peer to answer its close before cutting it (ws itself
 * waits 30 s): an agent or a provider that never answers must not hold the daemon's close.
 */
const CLOSE_HANDSHAKE_MS = 5_000;

/** WebSocket sockets open now, closed when the app closes. */
export class OpenSockets {
  private readonly sockets = new Set<WebSocket>();
  add(socket: WebSocket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
  }
  closeAll(): void {
    for (const socket of this.sockets) {
      socket.close(1001, 'server closing');
      const cut = setTimeout(() => socket.terminate(), CLOSE_HANDSHAKE_MS);
      socket.once('close', () => clearTimeout(cut));
    }
  }
}

/**
 * Relays one upgraded request: connects upstream first (its refusal becomes the client's, as an
 * HTTP answer), then completes the client's handshake and relays both ways.
 */
export function relayResponsesSocket(
  request: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  call: { provider: Provider; path: string; target: Target },
  options: SocketRelayOptions,
  open: OpenSockets,
): void {
  const { provider, path, target } = call;
  const { log } = options;
  const headers = upstreamHeaders(request.headers);
  for (const name of Object.keys(headers)) if (HANDSHAKE.test(name)) delete headers[name];
  delete headers['accept-encoding'];
  const url = `${provider.origin.replace(/^http/, 'ws')}${provider.basePath}${path}`;
  const upstream = new WebSocket(url, { headers, maxPayload: 0, perMessageDeflate: false, handshakeTimeout: 10_000 });

  let socketGone = false;
  socket.once('close', () => {
    socketGone = true;
    if (upstream.readyState === WebSocket.CONNECTING) upstream.terminate();
  });
  upstream.once('unexpected-response', (_req, res) => {
    // The provider refused the socket: the client gets its status and body as they were.
    const chunks: Buffer[] = [];
    res.on('data', (chunk: Buffer) => chunks.push(chunk));
    res.on('end', () => {
      const body = Buffer.concat(chunks);
      writeHttpAnswer(socket, res.statusCode ?? 502, body, String(res.headers['content-type'] ?? 'application/json'));
    });
    res.on('error', () => socket.destroy());
  });
  upstream.once('error', (error) => {
    if (upstream.readyState !== WebSocket.CLOSED && upstream.readyState !== WebSocket.CLOSING) return;
    if (socketGone || socket.writableEnded) return;
    log.warn({ err: error, provider: provider.name }, 'upstream WebSocket failed');
    const failure = upstreamFailure(error, provider);
    const body = JSON.stringify(provider.adapter.errorBody(failure.status, failure.message, failure.code));
    writeHttpAnswer(socket, 502, Buffer.from(body), 'application/json');
  });
  upstream.once('open', () => {
    if (socketGone) return upstream.close(1001);
    const server = new WebSocketServer({
      noServer: true,
      perMessageDeflate: false,
      maxPayload: 2 * options.maxMessageBytes,
    });
    server.handleUpgrade(request, socket, head, (client) => {
      open.add(client);
      open.add(upstream);
      new SocketPair(
        client,
        upstream,
        { provider, path, target },
        options,
        traceparentOf(request.headers.traceparent),
      ).start();
    });
  });
}

/** An HTTP answer on a socket whose upgrade is refused. */
export function writeHttpAnswer(socket: Duplex, status: number, body: Buffer, contentType: string): void {
  if (socket.destroyed) return;
  const head =
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\nconnection: close\r\ncontent-type: ${contentType}\r\n` +
    `content-length: ${body.length}\r\n\r\n`;
  socket.end(Buffer.concat([Buffer.from(head), body]));
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  409: 'Conflict',
  426: 'Upgrade Required',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

/** A step forwarded upstream, waiting for the events that end its response. */
interface PendingStep {
  record: RecordResult;
}

class SocketPair {
  /** Client messages are handled one after another: a later one waits for an earlier check. */
  private queue: Promise<void> = Promise.resolve();
  /** Steps sent upstream, oldest first: the provider answers them in order. */
  private readonly pending: PendingStep[] = [];
  private idle: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly client: WebSocket,
    private readonly upstream: WebSocket,
    private readonly call: { provider: Provider; path: string; target: Target },
    private readonly options: SocketRelayOptions,
    /** The upgrade request's trace context: the parent of its calls' spans. */
    private readonly traceparent: string | undefined,
  ) {}

  start(): void {
    const { client, upstream } = this;
    this.touch();
    client.on('message', (data, isBinary) => {
      this.touch();
      const bytes = toBuffer(data);
      this.queue = this.queue
        .then(() => this.fromClient(bytes, isBinary))
        .catch((error: unknown) => {
          this.options.log.error({ err: error }, 'relaying a WebSocket message failed');
          this.closeBoth(1011, 'internal error');
        });
    });
    upstream.on('message', (data, isBinary) => {
      this.touch();
      const bytes = toBuffer(data);
      if (!isBinary) this.readEnding(bytes);
      if (client.readyState === WebSocket.OPEN) client.send(bytes, { binary: isBinary });
    });
    client.on('close', (code) => this.closeBoth(code, '', 'CLIENT_ABORTED'));
    upstream.on('close', (code) => this.closeBoth(code, '', 'UPSTREAM_BROKEN'));
    // A socket's errors are followed by its close, handled above.
    client.on('error', (error) => this.options.log.info({ err: error }, 'agent WebSocket error'));
    upstream.on('error', (error) => this.options.log.warn({ err: error }, 'upstream WebSocket error'));
  }

  private async fromClient(bytes: Buffer, isBinary: boolean): Promise<void> {
    if (this.closed) return;
    const { provider } = this.call;
    if (bytes.length > this.options.maxMessageBytes) {
      return this.refuse(1009, 413, 'PAYLOAD_TOO_LARGE', `A message may hold ${this.options.maxMessageBytes} bytes.`);
    }
    const event = isBinary ? undefined : asObject(parseJson(bytes.toString('utf8')));
    if (!event) return this.refuse(1007, 400, 'INVALID_JSON', 'Every message must be a JSON object.');
    if (event.type !== 'response.create') return void this.upstream.send(bytes);

    // The step: the event's body read as the HTTP API's request body.
    const body = asObject(event.response) ?? event;
    const input = callInput(
      provider,
      { method: 'POST', path: this.call.path, body: Buffer.from(JSON.stringify(body)) },
      this.options.audit,
    );
    input.stepInput.model ??= modelNamed(body.model);
    const { telemetry } = this.options;
    const traced = telemetry.enabled
      ? {
          workspaceId: this.call.target.workspaceId,
          requestModel: input.stepInput.model,
          path: this.call.path,
          provider,
          startedAt: Date.now(),
        }
      : null;
    let checked;
    try {
      checked = await checkCall(this.options.guard, this.call.target, provider.name, input.stepInput, this.options.log);
      await checked.recorded;
    } catch (error) {
      if (traced) traceDenial(telemetry, traced, this.call.target.runId, error, this.traceparent);
      return this.answerRefusal(error);
    }
    if (this.closed) return;
    const written = resultRecorder(
      this.options.guard,
      this.options.calls,
      checked.step,
      Promise.resolve(),
      this.options.log,
    );
    const record = traced ? tracedResult(written, telemetry, traced, checked.step, this.traceparent) : written;
    this.pending.push({ record });
    this.upstream.send(bytes);
  }

  /** The first pending step's result, from an event that ends a response. */
  private readEnding(bytes: Buffer): void {
    if (this.pending.length === 0) return;
    const text = bytes.toString('utf8');
    const kind = ENDING_EVENT.exec(text)?.[1];
    if (!kind) return;
    const event = asObject(parseJson(text));
    if (!event || event.type !== kind) return;
    const step = this.pending.shift()!;
    const response = asObject(event.response);
    const tokens = tokensFromUsage('openai-responses', response?.usage) ?? NO_TOKENS;
    const model = modelNamed(response?.model);
    if (kind === 'response.completed' || kind === 'response.incomplete') {
      step.record('COMPLETED', tokens, { event: kind }, model);
    } else {
      const status = typeof event.status === 'number' ? event.status : undefined;
      step.record(
        'FAILED',
        tokens,
        { event: kind, error: 'UPSTREAM_STREAM_ERROR', ...(status ? { http_status: status } : {}) },
        model,
      );
    }
  }

  /** A refused `response.create`: an `error` event in the provider's shape; nothing went upstream. */
  private answerRefusal(error: unknown): void {
    const refusal =
      error instanceof ProxyRefusal
        ? error
        : (() => {
            const apiError = toApiError(error as FastifyError);
            if (apiError.statusCode >= 500) this.options.log.error({ err: error }, 'checking a WebSocket call failed');
            return new ProxyRefusal(apiError.statusCode, apiError.code, apiError.message);
          })();
    const { provider } = this.call;
    const body = asObject(
      refusal.statusCode === 403
        ? provider.adapter.denialBody(refusal.code, refusal.message)
        : provider.adapter.errorBody(refusal.statusCode, refusal.message, refusal.code),
    );
    this.sendToClient({ type: 'error', status: refusal.statusCode, error: body?.error ?? body });
    // A credential that stopped working (the run ended) will not work for the next event either.
    if (refusal.statusCode === 401 || (isApiError(error) && error.code === 'UNAUTHORIZED'))
      this.closeBoth(1008, 'unauthorized');
  }

  private refuse(code: number, status: number, errorCode: string, message: string): void {
    this.sendToClient({
      type: 'error',
      status,
      error: { type: 'invalid_request_error', code: errorCode, message, param: null },
    });
    this.closeBoth(code, errorCode);
  }

  private sendToClient(event: unknown): void {
    if (this.client.readyState === WebSocket.OPEN) this.client.send(JSON.stringify(event));
  }

  private touch(): void {
    if (this.idle) this.idle.refresh();
    else this.idle = setTimeout(() => this.closeBoth(1001, 'idle'), this.options.idleMs).unref();
  }

  /** Closes both sockets (once); steps still waiting for their answer end FAILED. */
  private closeBoth(code: number, reason: string, failure = 'CLIENT_ABORTED'): void {
    if (this.closed) return;
    this.closed = true;
    if (this.idle) clearTimeout(this.idle);
    for (const step of this.pending.splice(0)) step.record('FAILED', NO_TOKENS, { error: failure });
    const closeCode = validCloseCode(code);
    for (const socket of [this.client, this.upstream]) {
      if (socket.readyState === WebSocket.OPEN || socket.readyState === WebSocket.CONNECTING)
        socket.close(closeCode, reason);
    }
  }
}

/** A code one may send in a close frame (1005 and 1006 are only ever observed). */
function validCloseCode(code: number): number {
  return (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) ||
    (code >= 3000 && code <= 4999)
    ? code
    : 1000;
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}
