/**
 * A fake model provider on a real port (127.0.0.1, port 0) for tests and benches. It answers like
 * OpenAI (`/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`), Anthropic (`/v1/messages`)
 * and Gemini (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`, `:countTokens`),
 * JSON or SSE, with deterministic token counts, and records every request it receives.
 * Endpoints are matched by path suffix, so a base path without `/v1` works too.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { WebSocketServer } from 'ws';

export interface FakeUpstreamOptions {
  /** Milliseconds before the response starts. Per request: header `x-fake-delay-ms`. @default 0 */
  delayMs?: number;
  /** Milliseconds between SSE events. Per request: header `x-fake-chunk-delay-ms`. @default 0 */
  chunkDelayMs?: number;
  /**
   * Answer every request with this status and an error body in the provider's format.
   * Per request: header `x-fake-status`.
   */
  status?: number;
  /**
   * Close the connection, unfinished, after this many SSE events (a broken upstream).
   * Per request: header `x-fake-abort-after-events`.
   */
  abortAfterEvents?: number;
  /** How long an idle keep-alive connection stays open, in ms. @default Node's (5 s) */
  keepAliveTimeoutMs?: number;
  /** The assistant's reply; streamed one word per delta. @default 'Hello from the fake upstream.' */
  reply?: string;
  /** Prompt tokens reported (cache reads and writes included). @default promptTokensFor(body) */
  promptTokens?: number;
  /** @default completionTokensFor(reply) */
  completionTokens?: number;
  /** The part of the prompt reported as read from cache. Per request: header `x-fake-cached-tokens`. @default 0 */
  cachedTokens?: number;
  /**
   * The part of the prompt reported as written to cache (Anthropic's `cache_creation_input_tokens`,
   * OpenAI's `cache_write_tokens`). Per request: header `x-fake-cache-write-tokens`. @default 0
   */
  cacheCreationTokens?: number;
  /**
   * The part of the completion reported as reasoning (OpenAI's `reasoning_tokens`, Anthropic's
   * `thinking_tokens`, sent only when given). Per request: header `x-fake-reasoning-tokens`. @default 0
   */
  reasoningTokens?: number;
  /** @default 8 */
  embeddingDimensions?: number;
  /**
   * A tool call to answer instead of the reply (Anthropic's messages and the Responses API):
   * given each request's body, the tool's name and input, or null to reply with text. What an
   * agent loop needs to make a second call (with the tool's result).
   */
  toolCallFor?: (body: Record<string, unknown>) => ToolCall | null;
}

export interface ToolCall {
  name: string;
  input: Record<string, unknown>;
}

export interface RecordedRequest {
  method: string;
  /** Path with its query string, as received. */
  path: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body, else the raw text, `undefined` when empty. */
  body: unknown;
  rawBody: string;
}

export interface FakeUpstream {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  url: string;
  /** Every request received, in arrival order. */
  requests: RecordedRequest[];
  /** Every WebSocket opened to `.../responses` (the Responses API's), with the messages it received. */
  sockets: RecordedSocket[];
  /**
   * Lets the requests sent with `x-fake-hold: <name>` answer, now and from now on: a test holds
   * calls for as long as its checks need, not for a guessed time.
   */
  release(name: string): void;
  close(): Promise<void>;
}

export interface RecordedSocket {
  path: string;
  headers: IncomingHttpHeaders;
  /** The client's messages, parsed. */
  messages: unknown[];
}

export const DEFAULT_REPLY = 'Hello from the fake upstream.';

/** Characters of every string under `messages`, `input`, `prompt`, `system` and `contents`, divided by 4, rounded up, at least 1. */
export function promptTokensFor(body: unknown): number {
  const request = isObject(body) ? body : {};
  const chars = [request.messages, request.input, request.prompt, request.system, request.contents]
    .map(textLength)
    .reduce((a, b) => a + b, 0);
  return Math.max(1, Math.ceil(chars / 4));
}

export function completionTokensFor(reply: string): number {
  return Math.max(1, Math.ceil(reply.length / 4));
}

type Json = Record<string, unknown>;
type Provider = 'openai' | 'anthropic' | 'google';
interface SseMessage {
  event?: string;
  data: unknown;
}

interface Call {
  /** The request's path, query string included. */
  path: string;
  body: Json;
  toolCall: ToolCall | null;
  model: string;
  reply: string;
  prompt: number;
  completion: number;
  cached: number;
  cacheCreation: number;
  reasoning: number;
  id: string;
  created: number;
}

export async function startFakeUpstream(options: FakeUpstreamOptions = {}): Promise<FakeUpstream> {
  const requests: RecordedRequest[] = [];
  let sequence = 0;
  const holds = new Map<string, { released: Promise<void>; release: () => void }>();
  const hold = (name: string) => {
    let found = holds.get(name);
    if (!found) {
      let release = () => {};
      const released = new Promise<void>((resolve) => (release = resolve));
      found = { released, release };
      holds.set(name, found);
    }
    return found;
  };

  const server = createServer((req, res) => {
    res.on('error', () => {}); // a client hanging up mid-stream is expected in tests
    handle(req, res).catch(() => res.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const rawBody = await readBody(req);
    const body = parseBody(rawBody);
    const path = req.url ?? '/';
    requests.push({ method: req.method ?? 'GET', path, headers: req.headers, body, rawBody });

    const pathname = path.split('?')[0] ?? '/';
    const provider: Provider = pathname.endsWith('/messages')
      ? 'anthropic'
      : GEMINI_METHOD.test(pathname)
        ? 'google'
        : 'openai';
    const requestId = `req_fake${++sequence}`;
    res.setHeader(provider === 'anthropic' ? 'request-id' : 'x-request-id', requestId);

    const delay = headerNumber(req, 'x-fake-delay-ms') ?? options.delayMs ?? 0;
    if (delay > 0) await sleep(delay);
    const held = req.headers['x-fake-hold'];
    if (typeof held === 'string') await hold(held).released;

    const status = headerNumber(req, 'x-fake-status') ?? options.status;
    if (status !== undefined) {
      return sendJson(res, status, errorBody(provider, status, `Fake upstream error ${status}`, requestId));
    }
    const handler = routeOf(req.method, pathname);
    if (!handler) return sendJson(res, 404, errorBody(provider, 404, `No route ${req.method} ${pathname}`, requestId));
    if (!isObject(body)) return sendJson(res, 400, errorBody(provider, 400, 'Body must be a JSON object', requestId));

    const result = handler(callOf(req, path, body, sequence));
    if (result instanceof JsonArray) return sendJson(res, 200, result.items);
    if (!Array.isArray(result)) return sendJson(res, 200, result);
    await sendEvents(res, result, {
      chunkDelayMs: headerNumber(req, 'x-fake-chunk-delay-ms') ?? options.chunkDelayMs ?? 0,
      abortAfterEvents: headerNumber(req, 'x-fake-abort-after-events') ?? options.abortAfterEvents,
    });
  }

  function callOf(req: IncomingMessage, path: string, body: Json, id: number): Call {
    const reply = options.reply ?? DEFAULT_REPLY;
    return {
      path,
      body,
      toolCall: options.toolCallFor?.(body) ?? null,
      model:
        typeof body.model === 'string'
          ? body.model
          : (GEMINI_METHOD.exec(path.split('?')[0] ?? '')?.[1] ?? 'fake-model'),
      reply,
      prompt: options.promptTokens ?? promptTokensFor(body),
      completion: options.completionTokens ?? completionTokensFor(reply),
      cached: headerNumber(req, 'x-fake-cached-tokens') ?? options.cachedTokens ?? 0,
      cacheCreation: headerNumber(req, 'x-fake-cache-write-tokens') ?? options.cacheCreationTokens ?? 0,
      reasoning: headerNumber(req, 'x-fake-reasoning-tokens') ?? options.reasoningTokens ?? 0,
      id: String(id),
      created: Math.floor(Date.now() / 1000),
    };
  }

  // The Responses API over WebSocket: each `response.create` is answered with the events the
  // streamed HTTP answer carries, one message each.
  const sockets: RecordedSocket[] = [];
  const webSockets = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = req.url ?? '/';
    if (!path.split('?')[0]!.endsWith('/responses')) {
      socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    webSockets.handleUpgrade(req, socket, head, (ws) => {
      const recorded: RecordedSocket = { path, headers: req.headers, messages: [] };
      sockets.push(recorded);
      ws.on('message', (data) => {
        const event = parseBody(String(data));
        recorded.messages.push(event);
        if (!isObject(event) || event.type !== 'response.create') return;
        const body = isObject(event.response) ? event.response : event;
        const events = response(callOf(req, path, { ...body, stream: true }, ++sequence)) as SseMessage[];
        for (const message of events) ws.send(JSON.stringify(message.data));
      });
    });
  });

  function routeOf(
    method: string | undefined,
    pathname: string,
  ): ((call: Call) => Json | JsonArray | SseMessage[]) | undefined {
    if (method !== 'POST') return undefined;
    if (pathname.endsWith('/chat/completions')) return chatCompletion;
    if (pathname.endsWith('/responses')) return response;
    if (pathname.endsWith('/embeddings')) return (call) => embeddings(call, options.embeddingDimensions ?? 8);
    if (pathname.endsWith('/messages')) return message;
    const gemini = GEMINI_METHOD.exec(pathname)?.[2];
    if (gemini === 'generateContent' || gemini === 'streamGenerateContent') return generateContent;
    if (gemini === 'countTokens') return (call) => ({ totalTokens: promptTokensFor(call.body) });
    return undefined;
  }

  if (options.keepAliveTimeoutMs !== undefined) server.keepAliveTimeout = options.keepAliveTimeoutMs;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    sockets,
    release: (name) => hold(name).release(),
    close: () =>
      new Promise<void>((resolve, reject) => {
        for (const ws of webSockets.clients) ws.terminate();
        server.closeAllConnections();
        server.close((err) => (err ? reject(err) : resolve()));
      }),
  };
}

// --- OpenAI ---------------------------------------------------------------------------------

function chatCompletion(call: Call): Json | SseMessage[] {
  const usage = {
    prompt_tokens: call.prompt,
    completion_tokens: call.completion,
    total_tokens: call.prompt + call.completion,
    prompt_tokens_details: { cached_tokens: call.cached, cache_write_tokens: call.cacheCreation, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: call.reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
  const head = {
    id: `chatcmpl-fake${call.id}`,
    created: call.created,
    model: call.model,
    system_fingerprint: 'fp_fake',
  };
  if (call.body.stream !== true) {
    return {
      ...head,
      object: 'chat.completion',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: call.reply, refusal: null, annotations: [] },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage,
      service_tier: 'default',
    };
  }
  const streamOptions = isObject(call.body.stream_options) ? call.body.stream_options : {};
  const includeUsage = streamOptions.include_usage === true;
  const chunk = (delta: Json, finishReason: string | null): SseMessage => ({
    data: {
      ...head,
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      ...(includeUsage ? { usage: null } : {}),
    },
  });
  return [
    chunk({ role: 'assistant', content: '', refusal: null }, null),
    ...words(call.reply).map((content) => chunk({ content }, null)),
    chunk({}, 'stop'),
    ...(includeUsage ? [{ data: { ...head, object: 'chat.completion.chunk', choices: [], usage } }] : []),
    { data: '[DONE]' },
  ];
}

function response(call: Call): Json | SseMessage[] {
  if (call.toolCall) return functionCallResponse(call, call.toolCall);
  const itemId = `msg_fake${call.id}`;
  const part = { type: 'output_text', text: call.reply, annotations: [], logprobs: [] };
  const item = { type: 'message', id: itemId, status: 'completed', role: 'assistant', content: [part] };
  const base = responseBase(call);
  const completed = completedResponse(call, base, [item]);
  if (call.body.stream !== true) return completed;

  const inProgress = { ...base, status: 'in_progress', output: [], usage: null };
  const at = { item_id: itemId, output_index: 0, content_index: 0 };
  const events: Json[] = [
    { type: 'response.created', response: inProgress },
    { type: 'response.in_progress', response: inProgress },
    { type: 'response.output_item.added', output_index: 0, item: { ...item, status: 'in_progress', content: [] } },
    { type: 'response.content_part.added', ...at, part: { ...part, text: '' } },
    ...words(call.reply).map((delta) => ({ type: 'response.output_text.delta', ...at, delta, logprobs: [] })),
    { type: 'response.output_text.done', ...at, text: call.reply, logprobs: [] },
    { type: 'response.content_part.done', ...at, part },
    { type: 'response.output_item.done', output_index: 0, item },
    { type: 'response.completed', response: completed },
  ];
  return events.map((data, sequence_number) => ({ event: String(data.type), data: { ...data, sequence_number } }));
}

/** A response whose one output is a call of the client's function `tool`. */
function functionCallResponse(call: Call, tool: ToolCall): Json | SseMessage[] {
  const args = JSON.stringify(tool.input);
  const item = {
    type: 'function_call',
    id: `fc_fake${call.id}`,
    call_id: `call_fake${call.id}`,
    name: tool.name,
    arguments: args,
    status: 'completed',
  };
  const base = responseBase(call);
  const completed = completedResponse(call, base, [item]);
  if (call.body.stream !== true) return completed;
  const inProgress = { ...base, status: 'in_progress', output: [], usage: null };
  const events: Json[] = [
    { type: 'response.created', response: inProgress },
    { type: 'response.in_progress', response: inProgress },
    { type: 'response.output_item.added', output_index: 0, item: { ...item, arguments: '', status: 'in_progress' } },
    { type: 'response.function_call_arguments.delta', item_id: item.id, output_index: 0, delta: args },
    { type: 'response.function_call_arguments.done', item_id: item.id, output_index: 0, arguments: args },
    { type: 'response.output_item.done', output_index: 0, item },
    { type: 'response.completed', response: completed },
  ];
  return events.map((data, sequence_number) => ({ event: String(data.type), data: { ...data, sequence_number } }));
}

function responseBase(call: Call): Json {
  return {
    id: `resp_fake${call.id}`,
    object: 'response',
    created_at: call.created,
    error: null,
    incomplete_details: null,
    instructions: null,
    max_output_tokens: null,
    model: call.model,
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: true,
    temperature: 1,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: 1,
    truncation: 'disabled',
    user: null,
    metadata: {},
  };
}

function completedResponse(call: Call, base: Json, output: Json[]): Json {
  return {
    ...base,
    status: 'completed',
    output,
    usage: {
      input_tokens: call.prompt,
      input_tokens_details: { cached_tokens: call.cached, cache_write_tokens: call.cacheCreation },
      output_tokens: call.completion,
      output_tokens_details: { reasoning_tokens: call.reasoning },
      total_tokens: call.prompt + call.completion,
    },
  };
}

function embeddings(call: Call, dimensions: number): Json {
  const inputs = Array.isArray(call.body.input) ? call.body.input : [call.body.input];
  const base64 = call.body.encoding_format === 'base64';
  return {
    object: 'list',
    data: inputs.map((_, index) => {
      const vector = Array.from({ length: dimensions }, (_, i) => (index + 1) / (i + 2));
      const embedding = base64 ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector;
      return { object: 'embedding', index, embedding };
    }),
    model: call.model,
    usage: { prompt_tokens: call.prompt, total_tokens: call.prompt },
  };
}

// --- Anthropic ------------------------------------------------------------------------------

function message(call: Call): Json | SseMessage[] {
  // Anthropic's input_tokens excludes cache reads and writes.
  const input = Math.max(0, call.prompt - call.cached - call.cacheCreation);
  const usage = {
    input_tokens: input,
    cache_creation_input_tokens: call.cacheCreation,
    cache_read_input_tokens: call.cached,
    output_tokens: call.completion,
    ...(call.reasoning > 0 ? { output_tokens_details: { thinking_tokens: call.reasoning } } : {}),
    service_tier: 'standard',
  };
  const head = { id: `msg_fake${call.id}`, type: 'message', role: 'assistant', model: call.model };
  const tool = call.toolCall && { type: 'tool_use', id: `toolu_fake${call.id}`, name: call.toolCall.name };
  const stopReason = tool ? 'tool_use' : 'end_turn';
  if (call.body.stream !== true) {
    return {
      ...head,
      content: [tool ? { ...tool, input: call.toolCall!.input } : { type: 'text', text: call.reply }],
      stop_reason: stopReason,
      stop_sequence: null,
      usage,
    };
  }
  const block: Json[] = tool
    ? [
        { type: 'content_block_start', index: 0, content_block: { ...tool, input: {} } },
        {
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'input_json_delta', partial_json: JSON.stringify(call.toolCall!.input) },
        },
      ]
    : [
        { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
        { type: 'ping' },
        ...words(call.reply).map((text) => ({
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'text_delta', text },
        })),
      ];
  const events: Json[] = [
    {
      type: 'message_start',
      message: { ...head, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } },
    },
    ...block,
    { type: 'content_block_stop', index: 0 },
    {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: null },
      usage: {
        output_tokens: call.completion,
        ...(call.reasoning > 0 ? { output_tokens_details: { thinking_tokens: call.reasoning } } : {}),
      },
    },
    { type: 'message_stop' },
  ];
  return events.map((data) => ({ event: String(data.type), data }));
}

// --- Google (Gemini) ------------------------------------------------------------------------

/** `/v1beta/models/{model}:{method}`: the model and the method. */
const GEMINI_METHOD = /\/models\/([^/:]+):([A-Za-z]+)$/;

/**
 * A GenerateContentResponse; streamed as one SSE event per word with `?alt=sse`, else (as Gemini
 * does) as a JSON array of the same chunks. Usage is cumulative, on every chunk.
 */
function generateContent(call: Call): Json | JsonArray | SseMessage[] {
  const usage = {
    promptTokenCount: call.prompt,
    candidatesTokenCount: call.completion,
    totalTokenCount: call.prompt + call.completion + call.reasoning,
    ...(call.cached > 0 ? { cachedContentTokenCount: call.cached } : {}),
    ...(call.reasoning > 0 ? { thoughtsTokenCount: call.reasoning } : {}),
  };
  const chunk = (text: string, last: boolean): Json => ({
    candidates: [
      {
        content: { parts: [{ text }], role: 'model' },
        ...(last ? { finishReason: 'STOP' } : {}),
        index: 0,
      },
    ],
    usageMetadata: usage,
    modelVersion: call.model,
    responseId: `fake${call.id}`,
  });
  if (!/:streamGenerateContent$/.test(call.path.split('?')[0]!)) return chunk(call.reply, true);
  const parts = words(call.reply).map((text, i, all) => chunk(text, i === all.length - 1));
  if (!/[?&]alt=sse(&|$)/.test(call.path)) return new JsonArray(parts);
  return parts.map((data) => ({ data }));
}

/** An answer sent as a JSON array (Gemini's stream without `alt=sse`). */
class JsonArray {
  constructor(readonly items: Json[]) {}
}

// --- Shared ---------------------------------------------------------------------------------

function errorBody(provider: Provider, status: number, message: string, requestId: string): Json {
  if (provider === 'google')
    return { error: { code: status, message, status: status >= 500 ? 'INTERNAL' : 'INVALID_ARGUMENT' } };
  if (provider === 'anthropic') {
    const type =
      status === 429
        ? 'rate_limit_error'
        : status === 529
          ? 'overloaded_error'
          : status >= 500
            ? 'api_error'
            : status === 404
              ? 'not_found_error'
              : 'invalid_request_error';
    return { type: 'error', error: { type, message }, request_id: requestId };
  }
  const type = status >= 500 ? 'server_error' : 'invalid_request_error';
  return { error: { message, type, param: null, code: `fake_${status}` } };
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function sendEvents(
  res: ServerResponse,
  messages: SseMessage[],
  { chunkDelayMs, abortAfterEvents }: { chunkDelayMs: number; abortAfterEvents: number | undefined },
): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  for (const [i, message] of messages.entries()) {
    if (res.destroyed) return;
    if (i === abortAfterEvents) {
      // Flush what was written, then close without the final chunk: the client sees a cut body.
      res.socket?.end();
      return;
    }
    if (i > 0 && chunkDelayMs > 0) await sleep(chunkDelayMs);
    const data = typeof message.data === 'string' ? message.data : JSON.stringify(message.data);
    res.write(`${message.event === undefined ? '' : `event: ${message.event}\n`}data: ${data}\n\n`);
  }
  res.end();
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function parseBody(raw: string): unknown {
  if (raw === '') return undefined;
  try {
    return JSON.parse(raw) as unknown;
  } catch {
    return raw;
  }
}

function headerNumber(req: IncomingMessage, name: string): number | undefined {
  const value = req.headers[name];
  const n = typeof value === 'string' ? Number(value) : NaN;
  return Number.isFinite(n) ? n : undefined;
}

/** Words with their trailing space, so the deltas join back into the reply. */
function words(text: string): string[] {
  return text.match(/\S+\s*/g) ?? [text];
}

function textLength(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + textLength(v), 0);
  if (isObject(value)) return Object.values(value).reduce((n: number, v) => n + textLength(v), 0);
  return 0;
}

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
