/**
 * The wire contract: the one description of what the API takes and answers (TypeBox schemas).
 * Routes validate and serialize with these schemas, which also make the OpenAPI document; the
 * store, the CLI and the SDK take their types from them with `import type`, erased at build.
 */
export * from './common.js';
export * from './deny-reasons.js';
export * from './decision.js';
export * from './denial-detail.js';
export * from './runs.js';
export * from './pricing.js';
export * from './deletion.js';
export * from './dashboard.js';
export * from './webhooks.js';
export * from './users.js';
export * from './api-keys.js';
export * from './usage.js';
export * from './workspace.js';
export * from './health.js';
export * from './accounts.js';
export * from './proxy-tokens.js';
export * from './mcp.js';
export * from './budgets.js';
