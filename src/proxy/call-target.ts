/**
 * Where a proxied call goes, from its request line and headers alone: the workspace (by the
 * proxy token, or by the caller's key), the run (named, or none: the call starts a run of its
 * own; an agent key names only a run it started), and the path to forward to upstream.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { ApiKeyVerifier } from '../admin/api-key-verifier.js';
import type { Principal } from '../admin/principal.js';
import { pathUuid, UUID_PATTERN } from '../api/schemas.js';
import type { Clock } from '../clock.js';
import { tagsFromHeader } from '../contract/tag-pairs.js';
import { ApiError } from '../errors.js';
import { ProxyRefusal } from './proxy-refusal.js';
import type { ProxyTokenStore } from './proxy-tokens.js';

/** The path parameters of the three proxy routes. */
export interface ProxyParams {
  provider: string;
  run_id?: string;
  token?: string;
  '*': string;
}

/** Where a call goes: a workspace, and a run (null: start one around the call). */
export interface Target {
  workspaceId: string;
  runId: string | null;
  userId: string | null;
  /** How the run was named: an ended run reads as a dead token, or as a refused run id. */
  via: 'token' | 'run' | 'auto';
  /** The tags of the run a run-less call starts (`x-runguard-tags`); absent: none. */
  tags?: Record<string, string>;
  /**
   * The API key the call is made with: its `x-runguard-key` (or the daemon's default key), or the
   * key that minted its proxy token. Its spend counts against that key (key budgets).
   */
  apiKeyId: string | null;
}

/** What of a request its target is read from. */
export interface TargetRequest {
  params: Pick<ProxyParams, 'run_id' | 'token'>;
  headers: IncomingHttpHeaders;
  socket: { remoteAddress?: string | undefined };
}

export interface TargetOptions {
  keys: Pick<ApiKeyVerifier, 'verify'>;
  clock: Clock;
  tokens: ProxyTokenStore;
  /** The key a call without `x-runguard-key` is guarded with, from loopback only; null: none. */
  defaultApiKey: string | null;
  /** The user of a run-less call without `x-runguard-user-id`; null: the header is required. */
  defaultUserId: string | null;
  /** Whether the API key started the run: an agent key calls only into its own runs. */
  runStartedBy: (workspaceId: string, runId: string, apiKeyId: string) => Promise<boolean>;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);
const UUID = new RegExp(UUID_PATTERN);

/** How many segments of a route's pattern come before the upstream path (`/proxy/:provider/*`: 3). */
export function segmentsBeforeUpstreamPath(routePattern: string): number {
  return routePattern.split('/').length - 1;
}

/** A runguard API key or a run's proxy token inside a text (a query value, decoded). */
const RUNGUARD_SECRET = /lg_[a-z0-9]{12}_[A-Za-z0-9_-]{32}|rgp_[A-Za-z0-9_-]{43}/;

function decodedQueryPart(part: string): string {
  try {
    return decodeURIComponent(part.replace(/\+/g, ' '));
  } catch {
    return part;
  }
}

/**
 * A query string (from its `?`) without the parameters that carry a runguard key or token (an
 * SDK given `?api_key=lg_...`): those are runguard's, never the upstream's, as the
 * `x-runguard-key` header is not forwarded either. The others are kept as the client spelled them.
 */
export function upstreamQuery(query: string): string {
  if (query === '') return '';
  const kept = query
    .slice(1)
    .split('&')
    .filter((pair) => !RUNGUARD_SECRET.test(decodedQueryPart(pair)));
  return kept.length === 0 ? '' : `?${kept.join('&')}`;
}

/**
 * The upstream-relative path: the raw URL past its first `skip` segments, query string kept
 * (less any runguard credential in it).
 */
export function upstreamPath(rawUrl: string, skip: number): string {
  // An absolute-form request target (`POST http://any.host/proxy/...`, RFC 9112 3.2.2) is routed
  // by its path; its authority names nothing we forward to (upstreams are configuration), so only
  // the path counts here too. Without this its segments would be miscounted.
  const url = rawUrl.replace(/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i, '');
  const queryAt = url.indexOf('?');
  const path = queryAt === -1 ? url : url.slice(0, queryAt);
  const segments = path.split('/').slice(skip);
  for (const segment of segments) {
    let decoded = segment;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      /* left for the upstream to refuse */
    }
    // The upstream's base path is configuration: a dot segment must not climb out of it.
    if (decoded === '.' || decoded === '..' || decoded.includes('/') || decoded.includes('\\')) {
      throw new ProxyRefusal(400, 'BAD_PATH', 'The path may not contain dot segments or encoded slashes.');
    }
  }
  return `/${segments.join('/')}${queryAt === -1 ? '' : upstreamQuery(url.slice(queryAt))}`;
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

/** Resolves a request's target; an unknown token or key is refused (401), a bad run id is 404. */
export function targetResolver(options: TargetOptions): (request: TargetRequest) => Promise<Target> {
  const { keys, clock, tokens } = options;

  async function callerOf(request: TargetRequest): Promise<Principal> {
    const given = header(request.headers, 'x-runguard-key');
    // The daemon's own key stands in only for callers on this machine.
    const key =
      given ??
      (options.defaultApiKey && LOOPBACK.has(request.socket.remoteAddress ?? '') ? options.defaultApiKey : null);
    if (!key) throw new ApiError('UNAUTHORIZED', 'Missing x-runguard-key header.');
    const principal = await keys.verify(key, clock.now());
    if (!principal) throw new ApiError('UNAUTHORIZED', 'Invalid x-runguard-key.');
    return principal;
  }

  return async function resolveTarget(request) {
    const { token, run_id: runId } = request.params;
    if (token !== undefined) {
      const target = await tokens.resolve(token);
      if (!target) throw new ApiError('UNAUTHORIZED', 'Invalid proxy token.');
      return { ...target, userId: null, via: 'token' };
    }
    const caller = await callerOf(request);
    const { workspaceId } = caller;
    if (runId !== undefined) {
      if (!UUID.test(runId)) throw new ApiError('RUN_NOT_FOUND');
      const run = pathUuid(runId);
      // An agent key calls only into the runs it started (as it reads only those); an admin key, any.
      if (caller.role === 'agent' && !(await options.runStartedBy(workspaceId, run, caller.subjectId)))
        throw new ApiError('RUN_NOT_FOUND');
      return { workspaceId, runId: run, userId: null, via: 'run', apiKeyId: caller.subjectId };
    }
    const userId = header(request.headers, 'x-runguard-user-id') ?? options.defaultUserId;
    if (!userId || userId.length > 256) {
      throw new ApiError(
        'BAD_REQUEST',
        'A call without a run needs the x-runguard-user-id header (1 to 256 characters).',
      );
    }
    return {
      workspaceId,
      runId: null,
      userId,
      via: 'auto',
      apiKeyId: caller.subjectId,
      ...runlessTags(request.headers),
    };
  };
}

/**
 * The tags a run-less call gives its run: `x-runguard-tags: project=search,team=growth` (a value's
 * comma as `%2C`). A call into a named run ignores the header: that run's tags were fixed at its start.
 */
function runlessTags(headers: IncomingHttpHeaders): { tags?: Record<string, string> } {
  const given = headers['x-runguard-tags'];
  if (given === undefined) return {};
  const read = tagsFromHeader(Array.isArray(given) ? given.join(',') : given);
  if ('problem' in read) throw new ApiError('BAD_REQUEST', `The x-runguard-tags header is malformed: ${read.problem}.`);
  return { tags: read.tags };
}
