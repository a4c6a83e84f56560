/**
 * The CLI's client of the daemon's HTTP API: global fetch, a bearer key, errors mapped to the
 * server's `detail`. It imports nothing from the server, so it sees the API as any client would.
 */
import type {
  KillSwitch,
  ModelPricing,
  Page,
  PricingImport,
  RunDetail,
  RunListQuery as WireRunListQuery,
  RunSummary,
} from '../contract/index.js';
import { ApiRequestError, CliError, DaemonUnreachableError, keyHint, type ConnectionOrigin } from './errors.js';

export interface ApiClientOptions {
  /** The daemon's base URL, e.g. `http://127.0.0.1:8787`. */
  url: string;
  /** `lg_...`; sent as `Authorization: Bearer`. */
  apiKey: string;
  /** Per request. @default 30000 */
  timeoutMs?: number;
  /** Where the URL and the key came from, named by failures. */
  origin?: ConnectionOrigin;
}

// The daemon's answers are typed from the contract: types only, nothing of the server is loaded.
export type {
  Decision,
  ModelPricing,
  Page,
  PricingImport,
  RunDetail,
  RunStatus,
  RunSummary,
  Step,
} from '../contract/index.js';

/** `GET /v1/runs`'s query; the daemon fills in what is left out. */
export type RunListQuery = Partial<WireRunListQuery>;

/** A price as sent: USD per token; cache prices `null` (or absent): the input price applies. */
export interface PriceInput {
  input_cost_per_token: number;
  output_cost_per_token: number;
  cache_read_input_cost_per_token?: number | null;
  cache_write_input_cost_per_token?: number | null;
  /** Prices of a call whose prompt is above `above_prompt_tokens`; null (or absent): none. */
  long_context?: {
    above_prompt_tokens: number;
    input_cost_per_token: number;
    output_cost_per_token: number;
    cache_read_input_cost_per_token?: number | null;
    cache_write_input_cost_per_token?: number | null;
  } | null;
  is_active?: boolean;
}

/** An answer's JSON, or null when it is empty or not JSON. */
function parsedJson(text: string): unknown {
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return null;
  }
}

export class ApiClient {
  readonly url: string;
  private readonly apiKey: string;
  private readonly timeoutMs: number;
  private readonly origin: ConnectionOrigin | undefined;

  constructor(options: ApiClientOptions) {
    this.url = options.url.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.origin = options.origin;
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    return parsedJson(await this.exchange(method, path, body, 'application/json')) as T;
  }

  /** A GET answered in another form than JSON (`text/csv`): its text. Errors come as JSON still. */
  async text(path: string, accept: string): Promise<string> {
    return this.exchange('GET', path, undefined, accept);
  }

  private async exchange(method: string, path: string, body: unknown, accept: string): Promise<string> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.apiKey}`, accept };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(this.url + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (error) {
      throw new DaemonUnreachableError(this.url, connectionReason(error), this.origin);
    }
    let text: string;
    try {
      text = await res.text();
    } catch (error) {
      // A streamed answer (a large run's detail) cut after its status: the daemon logged why.
      throw new CliError(`the daemon's answer from ${this.url} was cut short (${connectionReason(error)}); try again.`);
    }
    if (!res.ok) {
      const errorBody = (parsedJson(text) ?? {}) as { detail?: unknown; code?: unknown; errors?: unknown };
      const detail =
        typeof errorBody.detail === 'string' ? errorBody.detail : `HTTP ${res.status} ${res.statusText}`.trim();
      throw new ApiRequestError(
        res.status,
        typeof errorBody.code === 'string' ? errorBody.code : null,
        res.status === 401 && this.origin ? `${detail.replace(/\.$/, '')}${keyHint(this.origin)}` : detail,
        Array.isArray(errorBody.errors) ? (errorBody.errors as { path: string; message: string }[]) : [],
      );
    }
    return text;
  }

  // --- Endpoints the CLI uses; add more here as commands need them. ---------------------------

  setKillSwitch(active: boolean) {
    return this.request<KillSwitch>('POST', '/v1/workspace/kill-switch', { active });
  }

  listPricing() {
    return this.request<ModelPricing[]>('GET', '/v1/model-pricing');
  }

  putPricing(model: string, price: PriceInput) {
    return this.request<ModelPricing>('PUT', `/v1/model-pricing/${encodeURIComponent(model)}`, priceBody(price));
  }

  importPricing(models: (PriceInput & { model: string })[], options: { overwrite: boolean; dryRun: boolean }) {
    return this.request<PricingImport>('POST', '/v1/model-pricing/import', {
      models: models.map((entry) => ({ model: entry.model, ...priceBody(entry) })),
      overwrite: options.overwrite,
      dry_run: options.dryRun,
    });
  }

  listRuns(query: RunListQuery = {}) {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) if (value !== undefined) params.set(key, String(value));
    const qs = params.toString();
    return this.request<Page<RunSummary>>('GET', `/v1/runs${qs ? `?${qs}` : ''}`);
  }

  getRun(id: string) {
    return this.request<RunDetail>('GET', `/v1/runs/${encodeURIComponent(id)}`);
  }
}

/** `ECONNREFUSED`, `ENOTFOUND`, `timed out`, ...: why fetch could not get an answer. */
export function connectionReason(error: unknown): string {
  const failure = error as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (failure?.name === 'TimeoutError' || failure?.name === 'AbortError') return 'no answer in time';
  return failure?.cause?.code ?? failure?.cause?.message ?? failure?.message ?? 'unknown error';
}

/** Only the fields the API takes: it refuses any other (a catalog entry's `provider`, say). */
function priceBody(price: PriceInput) {
  return {
    input_cost_per_token: price.input_cost_per_token,
    output_cost_per_token: price.output_cost_per_token,
    ...(price.cache_read_input_cost_per_token === undefined
      ? {}
      : { cache_read_input_cost_per_token: price.cache_read_input_cost_per_token }),
    ...(price.cache_write_input_cost_per_token === undefined
      ? {}
      : { cache_write_input_cost_per_token: price.cache_write_input_cost_per_token }),
    ...(price.long_context === undefined ? {} : { long_context: price.long_context && tierBody(price.long_context) }),
    ...(price.is_active === undefined ? {} : { is_active: price.is_active }),
  };
}

/** A long-context tier's fields the API takes (a catalog's tier also says where it comes from: `from`). */
function tierBody(tier: NonNullable<PriceInput['long_context']>) {
  return {
    above_prompt_tokens: tier.above_prompt_tokens,
    input_cost_per_token: tier.input_cost_per_token,
    output_cost_per_token: tier.output_cost_per_token,
    ...(tier.cache_read_input_cost_per_token === undefined
      ? {}
      : { cache_read_input_cost_per_token: tier.cache_read_input_cost_per_token }),
    ...(tier.cache_write_input_cost_per_token === undefined
      ? {}
      : { cache_write_input_cost_per_token: tier.cache_write_input_cost_per_token }),
  };
}
