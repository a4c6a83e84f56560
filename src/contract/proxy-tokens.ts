/** A run's proxy token on the wire: what `POST /v1/runs/:run_id/proxy-token` answers. */
import { Type, type Static } from 'typebox';
import { Nullable, Timestamp } from './common.js';

/** The token, and each provider's SDK base URL that carries it; `mcp`: the run's MCP base (add `/{server}`). */
export const ProxyToken = Type.Object({
  token: Type.String(),
  /** Always null: a token is valid for as long as its run is RUNNING. */
  expires_at: Nullable(Timestamp),
  urls: Type.Record(Type.String(), Type.String()),
});
export type ProxyToken = Static<typeof ProxyToken>;
