/** A run's proxy token on the wire: what `POST /v1/runs/:run_id/proxy-token` answers. */
import { Type, type Static } from './typebox.js';
import { Nullable, Timestamp } from './common.js';

/** The token, and each provider's SDK base URL that carries it; `mcp`: the run's MCP base (add `/{server}`). */
export const ProxyToken = Type.Object({
  token: Type.String(),
  /** Always null: a token is valid for as long as its run is RUNNING. */
  expires_at: Nullable(Timestamp),
  urls: Type.Record(Type.String(), Type.String()),
});
export type ProxyToken = Static<typeof ProxyToken>;

/** One provider the daemon proxies: `GET /v1/providers` (what `runguard status` shows). */
export const UpstreamProvider = Type.Object({
  name: Type.String(),
  type: Type.String(),
  /** Where its calls go. */
  upstream: Type.String(),
  /** The variable (or the configuration entry) that sets the upstream, when known. */
  set_by: Nullable(Type.String()),
});
export type UpstreamProvider = Static<typeof UpstreamProvider>;
