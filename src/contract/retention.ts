/**
 * The shortest retention of ended runs, in days: a retention never reaches this month's runs. No
 * imports, so the CLI checks and states it without loading the schemas.
 */
export const RETENTION_MIN_DAYS = 35;
