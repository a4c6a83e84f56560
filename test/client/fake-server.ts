/**
 * An in-memory, contract-faithful stand-in for the runguard daemon's four client endpoints, on a real
 * node:http server (port 0). It honours Idempotency-Key (replays the first answer), stores BLOCKED
 * steps, answers the contract's 409s and 422s, and can inject faults into the next requests.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { GuardClient, type ClientOptions } from '../../clients/typescript/src/index.js';

export const API_KEY = `lg_abcdef123456_${'s'.repeat(20)}-_${'K'.repeat(20)}`;

export type Fault =
  /** Answer this status (and body/headers) without processing the request. */
  | { kind: 'status'; status: number; body?: unknown; headers?: Record<string, string>; raw?: string }
  /** Destroy the socket before processing: the request never reached the server's logic. */
  | { kind: 'drop' }
  /** Process the request (state changes!) and then destroy the socket: the answer is lost. */
  | { kind: 'drop-after-processing' }
  /** Wait before processing. */
  | { kind: 'delay'; ms: number };

export interface RecordedRequest {
  method: string;
  path: string;
  body: unknown;
  idempotencyKey: string | undefined;
  headers: IncomingMessage['headers'];
}

export interface FakeRun {
  id: string;
  user_id: string;
  status: 'RUNNING' | 'COMPLETED' | 'FAILED' | 'BLOCKED';
  metadata: unknown;
  steps: FakeStep[];
}

export interface FakeStep {
  id: string;
  type: string;
  status: 'ALLOWED' | 'COMPLETED' | 'FAILED' | 'BLOCKED';
  sequence: number;
  model: string | null;
  tool_name: string | null;
  input_data: unknown;
  duration_ms: number | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
}

interface Answer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

const STEP_TYPES = ['INPUT', 'MODEL_CALL', 'TOOL_CALL', 'OUTPUT', 'REASONING', 'SYSTEM'];

export class FakeRunguard {
  readonly runs = new Map<string, FakeRun>();
  readonly requests: RecordedRequest[] = [];
  /** Users whose run starts and steps are denied with USER_BLOCKED. */
  readonly blockedUsers = new Set<string>();
  /** Models and tools whose steps are denied (as if a budget ran out). */
  readonly deniedModels = new Set<string>();
  readonly deniedTools = new Set<string>();
  killSwitch = false;
  /** Delay every answer by this much (ms); for the concurrency test. */
  latencyMs = 0;

  #faults: Fault[] = [];
  #idempotent = new Map<string, Answer>();
  #server: Server;
  url = '';

  constructor() {
    this.#server = createServer((req, res) => {
      void this.#handle(req, res);
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    const { port } = this.#server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  /** The next `times` requests suffer `fault`, before normal handling resumes. */
  failNext(times: number, fault: Fault): void {
    for (let i = 0; i < times; i++) this.#faults.push(fault);
  }

  /** Every request received with this method and a matching path, retries included. */
  requestsTo(method: string, pathPattern: RegExp): RecordedRequest[] {
    return this.requests.filter((r) => r.method === method && pathPattern.test(r.path));
  }

  onlyRun(): FakeRun {
    const runs = [...this.runs.values()];
    if (runs.length !== 1) throw new Error(`expected one run, found ${runs.length}`);
    return runs[0]!;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readBody(req);
    const path = (req.url ?? '/').split('?')[0]!;
    const method = req.method ?? 'GET';
    const idempotencyKey = header(req, 'idempotency-key');
    let body: unknown;
    let badJson = false;
    if (raw !== '') {
      try {
        body = JSON.parse(raw);
      } catch {
        badJson = true;
      }
    }
    this.requests.push({ method, path, body, idempotencyKey, headers: req.headers });

    const fault = this.#faults.shift();
    if (fault?.kind === 'drop') {
      req.socket.destroy();
      return;
    }
    if (fault?.kind === 'status') {
      if (fault.raw !== undefined) {
        res.writeHead(fault.status, { 'content-type': 'text/plain', ...fault.headers });
        res.end(fault.raw);
      } else {
        send(res, {
          status: fault.status,
          body: fault.body ?? { detail: 'Injected failure.', code: 'INJECTED' },
          headers: fault.headers,
        });
      }
      return;
    }
    if (fault?.kind === 'delay') await sleep(fault.ms);
    if (this.latencyMs) await sleep(this.latencyMs);

    let answer: Answer;
    const replayKey = idempotencyKey ? `${method} ${path} ${idempotencyKey}` : undefined;
    const replay = replayKey ? this.#idempotent.get(replayKey) : undefined;
    if (header(req, 'authorization') !== `Bearer ${API_KEY}`) {
      answer = error(401, 'The API key is missing or invalid.', 'INVALID_API_KEY');
    } else if (replay) {
      answer = { ...replay, headers: { ...replay.headers, 'idempotent-replayed': 'true' } };
    } else {
      answer = badJson ? error(400, 'The body is not valid JSON.', 'INVALID_JSON') : this.#route(method, path, body);
      // Only settled answers are remembered; a 5xx may be retried for real.
      if (replayKey && answer.status < 500) this.#idempotent.set(replayKey, answer);
    }

    if (fault?.kind === 'drop-after-processing') {
      req.socket.destroy();
      return;
    }
    send(res, answer);
  }

  #route(method: string, path: string, body: unknown): Answer {
    let match: RegExpMatchArray | null;
    if (method === 'POST' && path === '/v1/runs/') return this.#startRun(body);
    if ((match = path.match(/^\/v1\/runs\/([^/]+)\/end$/)) && method === 'POST') return this.#endRun(match[1]!, body);
    if ((match = path.match(/^\/v1\/runs\/([^/]+)\/steps$/)) && method === 'POST')
      return this.#createStep(match[1]!, body);
    if ((match = path.match(/^\/v1\/runs\/([^/]+)\/steps\/([^/]+)$/)) && method === 'PATCH') {
      return this.#updateStep(match[1]!, match[2]!, body);
    }
    return error(404, `No route ${method} ${path}.`, 'NOT_FOUND');
  }

  #startRun(body: unknown): Answer {
    const invalid = validate(body, { user_id: 'string' }, { metadata: 'object?' });
    if (invalid) return invalid;
    const { user_id, metadata } = body as { user_id: string; metadata?: unknown };
    const reason = this.killSwitch ? 'KILL_SWITCH_ACTIVE' : this.blockedUsers.has(user_id) ? 'USER_BLOCKED' : null;
    const run: FakeRun = {
      id: randomUUID(),
      user_id,
      status: reason ? 'BLOCKED' : 'RUNNING',
      metadata: metadata ?? null,
      steps: [],
    };
    this.runs.set(run.id, run);
    return {
      status: 201,
      body: { id: run.id, status: run.status, decision: { outcome: reason ? 'DENY' : 'ALLOW', reason } },
    };
  }

  #endRun(runId: string, body: unknown): Answer {
    const run = this.#findRun(runId);
    if (!run) return error(404, 'Run not found.', 'RUN_NOT_FOUND');
    const invalid = validate(body, { status: 'final' }, {});
    if (invalid) return invalid;
    if (run.status !== 'RUNNING') return error(409, `Run is ${run.status}, not RUNNING.`, 'RUN_NOT_RUNNING');
    run.status = (body as { status: 'COMPLETED' | 'FAILED' }).status;
    return { status: 200, body: { id: run.id, status: run.status, ended_at: new Date().toISOString() } };
  }

  #createStep(runId: string, body: unknown): Answer {
    const run = this.#findRun(runId);
    if (!run) return error(404, 'Run not found.', 'RUN_NOT_FOUND');
    const invalid = validate(
      body,
      { type: 'steptype', sequence: 'sequence' },
      { model: 'string?', tool_name: 'string?', input_data: 'object?' },
    );
    if (invalid) return invalid;
    if (run.status !== 'RUNNING') return error(409, `Run is ${run.status}, not RUNNING.`, 'RUN_NOT_RUNNING');
    const b = body as { type: string; sequence: number; model?: string; tool_name?: string; input_data?: unknown };
    if (run.steps.some((s) => s.sequence === b.sequence)) {
      return error(409, `Sequence ${b.sequence} is already used in this run.`, 'DUPLICATE_SEQUENCE');
    }
    const reason = this.killSwitch
      ? 'KILL_SWITCH_ACTIVE'
      : this.blockedUsers.has(run.user_id)
        ? 'USER_BLOCKED'
        : (b.model && this.deniedModels.has(b.model)) || (b.tool_name && this.deniedTools.has(b.tool_name))
          ? 'USER_DAILY_BUDGET_EXCEEDED'
          : null;
    const step: FakeStep = {
      id: randomUUID(),
      type: b.type,
      status: reason ? 'BLOCKED' : 'ALLOWED',
      sequence: b.sequence,
      model: b.model ?? null,
      tool_name: b.tool_name ?? null,
      input_data: b.input_data ?? null,
      duration_ms: null,
      prompt_tokens: null,
      completion_tokens: null,
    };
    run.steps.push(step);
    return {
      status: 201,
      body: { id: step.id, status: step.status, decision: { outcome: reason ? 'DENY' : 'ALLOW', reason } },
    };
  }

  #updateStep(runId: string, stepId: string, body: unknown): Answer {
    const run = this.#findRun(runId);
    const step = run?.steps.find((s) => s.id === stepId);
    if (!run || !step) return error(404, 'Step not found.', 'STEP_NOT_FOUND');
    const invalid = validate(
      body,
      { status: 'final' },
      {
        duration_ms: 'count?',
        prompt_tokens: 'count?',
        completion_tokens: 'count?',
        cache_read_tokens: 'count?',
        cache_write_tokens: 'count?',
        reasoning_tokens: 'count?',
        output_data: 'object?',
      },
    );
    if (invalid) return invalid;
    if (step.status !== 'ALLOWED') return error(409, `Step is ${step.status}.`, 'STEP_ALREADY_FINISHED');
    const b = body as Partial<FakeStep> & { status: 'COMPLETED' | 'FAILED' };
    step.status = b.status;
    step.duration_ms = b.duration_ms ?? null;
    step.prompt_tokens = b.prompt_tokens ?? null;
    step.completion_tokens = b.completion_tokens ?? null;
    return { status: 200, body: { id: step.id, status: step.status } };
  }

  #findRun(runId: string): FakeRun | undefined {
    return this.runs.get(runId);
  }
}

type Rule = 'string' | 'string?' | 'object?' | 'final' | 'steptype' | 'sequence' | 'count?';

/** The contract's 422: missing fields, wrong types, unknown enums and unknown fields. */
function validate(body: unknown, required: Record<string, Rule>, optional: Record<string, Rule>): Answer | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return {
      status: 422,
      body: {
        detail: 'The body must be a JSON object.',
        code: 'VALIDATION_ERROR',
        errors: [{ path: 'body', message: 'must be object' }],
      },
    };
  }
  const errors: { path: string; message: string }[] = [];
  const record = body as Record<string, unknown>;
  for (const [key, rule] of Object.entries(required)) {
    if (!(key in record)) errors.push({ path: `body.${key}`, message: 'is required' });
    else if (!check(record[key], rule)) errors.push({ path: `body.${key}`, message: `must be ${rule}` });
  }
  for (const [key, rule] of Object.entries(optional)) {
    if (key in record && !check(record[key], rule)) errors.push({ path: `body.${key}`, message: `must be ${rule}` });
  }
  for (const key of Object.keys(record)) {
    if (!(key in required) && !(key in optional)) errors.push({ path: `body.${key}`, message: 'is not allowed' });
  }
  if (errors.length === 0) return undefined;
  return { status: 422, body: { detail: 'The request body is invalid.', code: 'VALIDATION_ERROR', errors } };
}

function check(value: unknown, rule: Rule): boolean {
  switch (rule) {
    case 'string':
      return typeof value === 'string' && value !== '';
    case 'string?':
      return value === null || typeof value === 'string';
    case 'object?':
      return value === null || (typeof value === 'object' && !Array.isArray(value));
    case 'final':
      return value === 'COMPLETED' || value === 'FAILED';
    case 'steptype':
      return typeof value === 'string' && STEP_TYPES.includes(value);
    case 'sequence':
      return Number.isInteger(value) && (value as number) >= 1;
    case 'count?':
      return value === null || (Number.isInteger(value) && (value as number) >= 0);
  }
}

function error(status: number, detail: string, code: string): Answer {
  return { status, body: { detail, code } };
}

function send(res: ServerResponse, answer: Answer): void {
  res.writeHead(answer.status, {
    'content-type': 'application/json',
    'x-request-id': `req_${randomUUID()}`,
    ...answer.headers,
  });
  res.end(JSON.stringify(answer.body));
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A started fake daemon and a client of it, as each SDK test starts them; `close` closes both. */
export async function fakeRunguardAndClient(
  options: Omit<ClientOptions, 'apiKey' | 'baseUrl'> = {},
): Promise<{ server: FakeRunguard; guard: GuardClient; close(): Promise<void> }> {
  const server = await new FakeRunguard().start();
  const guard = new GuardClient({ apiKey: API_KEY, baseUrl: server.url, ...options });
  return {
    server,
    guard,
    async close() {
      await guard.close();
      await server.stop();
    },
  };
}
