/**
 * What `GET /v1/usage/report` groups spend by, beside `tag:{name}` (the value of the runs' tag
 * `name`). No imports, so the CLI's help names them without loading the schemas.
 */
export const REPORT_GROUPS = ['user', 'key', 'model', 'day'] as const;
export type ReportGroup = (typeof REPORT_GROUPS)[number] | `tag:${string}`;
