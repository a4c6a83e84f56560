/**
 * MCP on the wire: the upstream servers a workspace registers, tool prices and the tool policy
 * (docs/mcp.md).
 */
import { Type, type Static } from './typebox.js';
import { Nullable, Timestamp } from './common.js';

/** A server's name: what follows `/mcp/` in its sidecar URL, and the `{server}` of `{server}.{tool}`. */
export const McpServerName = Type.String({ pattern: '^[a-z0-9_-]{1,64}$' });

/** Header names as HTTP spells them; values are the operator's secrets. */
const HeaderName = Type.String({ pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$" });

/** `POST /v1/mcp/servers`: a name, the server's Streamable HTTP endpoint, and headers sent with every call. */
export const McpServerBody = Type.Object(
  {
    name: McpServerName,
    url: Type.String({ minLength: 1, maxLength: 2048 }),
    headers: Type.Optional(
      Type.Record(HeaderName, Type.String({ maxLength: 8192, pattern: '^[^\\r\\n\\u0000]*$' }), { maxProperties: 32 }),
    ),
  },
  { additionalProperties: false },
);
export type McpServerBody = Static<typeof McpServerBody>;

/** A registered server; header values are masked (their last four characters at most). */
export const McpServer = Type.Object({
  name: Type.String(),
  url: Type.String(),
  headers: Type.Record(Type.String(), Type.String()),
  created_at: Timestamp,
});
export type McpServer = Static<typeof McpServer>;

export const McpServerParams = Type.Object({ name: McpServerName });

/**
 * A pattern over `{server}.{tool}`: `*` stands for any run of characters (`github.*`, `*.delete_*`).
 */
export const ToolPattern = Type.String({ pattern: '^[A-Za-z0-9_.*/-]{1,200}$' });

/** `PUT /v1/tool-pricing/{pattern}`: what one call of a matching tool costs. */
export const ToolPriceBody = Type.Object(
  { per_call_usd: Type.Number({ minimum: 0, maximum: 1_000 }) },
  { additionalProperties: false },
);
export type ToolPriceBody = Static<typeof ToolPriceBody>;

export const ToolPrice = Type.Object({
  pattern: Type.String(),
  per_call_usd: Type.Number(),
  updated_at: Timestamp,
});
export type ToolPrice = Static<typeof ToolPrice>;

export const ToolPatternParams = Type.Object({ pattern: ToolPattern });

/**
 * Which tools a workspace's steps may call (rule tool_allowed): a tool matching a `deny` pattern is
 * denied; with an `allow` list, a tool matching none of it is denied too. null: no list.
 */
export const ToolPolicy = Type.Object(
  {
    allow: Nullable(Type.Array(ToolPattern, { maxItems: 200 })),
    deny: Nullable(Type.Array(ToolPattern, { maxItems: 200 })),
  },
  { additionalProperties: false },
);
export type ToolPolicy = Static<typeof ToolPolicy>;

/** `GET /v1/tools/usage`: a local date of the workspace's zone; today when left out. */
export const ToolUsageQuery = Type.Object({
  date: Type.Optional(Type.String({ pattern: '^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$' })),
});
export type ToolUsageQuery = Static<typeof ToolUsageQuery>;

/** One tool's TOOL_CALL steps of the day: all of them, those denied, those failed, and their cost. */
export const ToolUsageRow = Type.Object({
  tool: Type.String(),
  calls: Type.Integer(),
  denied: Type.Integer(),
  failed: Type.Integer(),
  spend_usd: Type.Number(),
});
export type ToolUsageRow = Static<typeof ToolUsageRow>;

export const ToolUsage = Type.Object({ date: Type.String(), rows: Type.Array(ToolUsageRow) });
export type ToolUsage = Static<typeof ToolUsage>;
