/**
 * Mints a run's proxy token, with the base URLs `runguard exec` hands to an unmodified agent: one
 * per provider, each carrying the token. Only for a RUNNING run of the caller's workspace (an agent
 * key's: one it started).
 */
import type { ProxyToken } from '../contract/index.js';
import { ApiError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { Queryable } from '../store/db.js';
import { runStatus } from '../store/runs.js';
import { sdkBaseUrl, type ProviderRegistry } from './provider-registry.js';
import { newProxyToken, saveProxyToken } from './proxy-tokens.js';

export class ProxyTokenIssuer {
  constructor(
    private readonly db: Queryable,
    private readonly clock: Clock,
    private readonly providers: ProviderRegistry,
    /** The daemon's address as agents reach it (configuration, or where it listens). */
    private readonly publicUrl: () => string,
  ) {}

  /**
   * `apiKeyId`: the caller's key (null: a session); the calls made with the token count against it.
   * `agentKeyId`: the caller is an agent key, which may proxy only into the runs it started (as it
   * reads only those): any other run is not found, as for its reads.
   */
  async issue(
    workspaceId: string,
    runId: string,
    apiKeyId: string | null,
    agentKeyId: string | null = null,
  ): Promise<ProxyToken> {
    const status = await runStatus(this.db, workspaceId, runId, agentKeyId);
    if (status === null) throw new ApiError('RUN_NOT_FOUND');
    if (status !== 'RUNNING') throw new ApiError('RUN_NOT_RUNNING');
    const token = newProxyToken();
    await saveProxyToken(this.db, token, { runId, workspaceId, apiKeyId }, this.clock.now());
    // From configuration, never from the Host header: a client may write any host there, and the
    // URL carries a credential to wherever it names.
    const proxyBase = `${this.publicUrl()}/proxy/t/${token}`;
    const urls: Record<string, string> = {};
    for (const name of this.providers.names()) urls[name] = sdkBaseUrl(this.providers.get(name)!, proxyBase);
    // The run's MCP base: a registered server's URL is this and `/{server}` (docs/mcp.md).
    urls.mcp = `${proxyBase}/mcp`;
    // Valid for as long as the run is RUNNING: no clock of its own.
    return { token, expires_at: null, urls };
  }
}
