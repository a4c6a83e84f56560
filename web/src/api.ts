/** The documented /v1 API, with the session's token. The only source of data the pages have. */
import type { Workspace as WireWorkspace } from '../../src/contract/index.js';
import { clearToken, getToken } from './session';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    detail: string,
  ) {
    super(detail);
  }
}

/** Called when the API says the session is over (401): the app goes to the sign-in page. */
let onSignedOut: () => void = () => {};
export function whenSignedOut(fn: () => void): void {
  onSignedOut = fn;
}

export async function api<T>(method: string, path: string, body?: unknown, token = getToken()): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch {
    throw new ApiError(0, 'NETWORK', 'The daemon did not answer: is it running?');
  }
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  const json = text ? (JSON.parse(text) as unknown) : undefined;
  if (!res.ok) {
    const error = json as { detail?: string; code?: string } | undefined;
    if (
      res.status === 401 &&
      token &&
      !path.startsWith('/v1/auth/login') &&
      !path.startsWith('/v1/auth/sign-in-links')
    ) {
      // Sent with a token the session has replaced since (the owner named, a sign-in): the 401 is
      // that token's, which the server ended with the change, not the session's. The request was
      // refused before anything was done: ask again with the session's token.
      const current = getToken();
      if (current !== null && current !== token) return api<T>(method, path, body, current);
      clearToken();
      onSignedOut();
    }
    throw new ApiError(res.status, error?.code ?? 'ERROR', error?.detail ?? `The daemon answered ${res.status}.`);
  }
  // Every view on screen reloads after a write (the kill switch banner, a list): see useLoad.
  // Not after the session's own writes: their answer is a new token (or none) the caller stores first.
  if (method !== 'GET' && !path.startsWith('/v1/auth/')) window.dispatchEvent(new Event(CHANGED));
  return json as T;
}

/** The event a successful write dispatches on window. */
export const CHANGED = 'runguard:changed';

export const qs = (params: Record<string, string | number | boolean | undefined | null>): string => {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params))
    if (value !== undefined && value !== null && value !== '') search.set(key, String(value));
  const text = search.toString();
  return text ? `?${text}` : '';
};

// The wire types, from the one contract the daemon validates with (types only: nothing of it is bundled).
export type {
  Decision,
  Page,
  RunSummary,
  Step,
  RunDetail,
  Overview,
  AccessToken as TokenAnswer,
  ModelPricing as Price,
  PricingCatalog,
  PricingImport,
  WebhookEndpoint,
  CreatedWebhookEndpoint,
  WebhookDelivery,
  WebhookPing,
  WebhookEventType,
  Usage,
  SdkUser,
  ToolUsage,
  Billing,
  ApiKey,
  Budget,
  BudgetCreateBody,
  Account as Me,
} from '../../src/contract/index.js';

/** The settings form reads a workspace's fields by name, so it may index it. */
export type Workspace = WireWorkspace & { [setting: string]: unknown };
