/**
 * Spend reports (`GET /v1/usage/report`): a range of local dates in the workspace's time zone,
 * grouped by user, key, model or day, as JSON or CSV. Sums are taken in integer microdollars and
 * turned into USD once, so the rows add up to the total exactly.
 */
import {
  REPORT_GROUPS,
  SPEND_REPORT_CSV_HEADER,
  TAG_KEY_PATTERN,
  type ReportGroup,
  type SpendReport,
  type SpendReportQuery,
} from '../contract/index.js';
import { ApiError } from '../errors.js';
import { decimalText, microsToUsd } from '../money/decimal.js';
import { addDays, localDate, startOfLocalDate } from '../periods.js';
import type { Db } from '../store/db.js';
import { spendByGroup, type SpendGroupRow } from '../store/spend-report.js';
import { workspaceTimeZone } from '../store/workspaces.js';

/** A report spans at most this many days: a year, leap or not. */
export const MAX_REPORT_DAYS = 366;

const invalid = (path: string, message: string) =>
  new ApiError('VALIDATION_FAILED', `${path} ${message}.`, { errors: [{ path, message }] });

const TAG_KEY = new RegExp(TAG_KEY_PATTERN);

const isReportGroup = (value: string): value is ReportGroup =>
  (REPORT_GROUPS as readonly string[]).includes(value) ||
  (value.startsWith('tag:') && TAG_KEY.test(value.slice('tag:'.length)));

/** Whether `YYYY-MM-DD` names a day of the calendar (not 2026-02-30). */
const isCalendarDate = (date: string): boolean => localDate(Date.parse(`${date}T00:00:00Z`), 'UTC') === date;

function checked(query: SpendReportQuery): ReportGroup {
  if (!isCalendarDate(query.from)) throw invalid('query.from', 'is not a calendar date (YYYY-MM-DD)');
  if (!isCalendarDate(query.to)) throw invalid('query.to', 'is not a calendar date (YYYY-MM-DD)');
  if (query.from > query.to) throw invalid('query.to', `must not be before from (${query.from})`);
  if (addDays(query.from, MAX_REPORT_DAYS - 1) < query.to)
    throw invalid('query.to', `must be at most ${MAX_REPORT_DAYS} days after from, both included`);
  if (!isReportGroup(query.group_by))
    throw invalid('query.group_by', `must be one of ${REPORT_GROUPS.join(', ')}, or tag:{name} (a tag key)`);
  return query.group_by;
}

function figures(row: Omit<SpendGroupRow, 'key'>) {
  return {
    spend_usd: microsToUsd(row.spendMicros),
    tokens: row.tokens,
    calls: row.calls,
    unpriced_calls: row.unpricedCalls,
  };
}

/** Days in date order; other groups by spend, the largest first, then by key, the unmatched last. */
function ordered(rows: SpendGroupRow[], group: ReportGroup): SpendGroupRow[] {
  const byKey = (left: SpendGroupRow, right: SpendGroupRow) => {
    if (left.key === right.key) return 0;
    if (left.key === null) return 1;
    if (right.key === null) return -1;
    return left.key < right.key ? -1 : 1;
  };
  if (group === 'day') return rows.sort(byKey);
  return rows.sort((left, right) => {
    if (left.spendMicros === right.spendMicros) return byKey(left, right);
    return left.spendMicros > right.spendMicros ? -1 : 1;
  });
}

export class SpendReports {
  constructor(private readonly db: Db) {}

  async report(workspaceId: string, query: SpendReportQuery): Promise<SpendReport> {
    const group = checked(query);
    const timeZone = await workspaceTimeZone(this.db, workspaceId);
    const range = {
      start: new Date(startOfLocalDate(query.from, timeZone)),
      end: new Date(startOfLocalDate(addDays(query.to, 1), timeZone)),
      timeZone,
    };
    const rows = ordered(await spendByGroup(this.db, workspaceId, group, range), group);
    const total = rows.reduce(
      (sum, row) => ({
        spendMicros: sum.spendMicros + row.spendMicros,
        tokens: sum.tokens + row.tokens,
        calls: sum.calls + row.calls,
        unpricedCalls: sum.unpricedCalls + row.unpricedCalls,
      }),
      { spendMicros: 0n, tokens: 0, calls: 0, unpricedCalls: 0 },
    );
    return {
      from: query.from,
      to: query.to,
      group_by: group,
      rows: rows.map((row) => ({ key: row.key, ...figures(row) })),
      total: figures(total),
    };
  }
}

/**
 * A CSV field: quoted when it holds a comma, a quote or a line break; null is empty. A key that
 * a spreadsheet would run as a formula (a user id is whatever the caller sent: `=HYPERLINK(...)`)
 * gets a leading apostrophe, as OWASP's CSV-injection advice has it.
 */
export function csvField(value: string | null): string {
  if (value === null) return '';
  const inert = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(inert) ? `"${inert.replaceAll('"', '""')}"` : inert;
}

/** The report as CSV (RFC 4180 lines): the header, then one line per row, no total line. */
export function spendReportCsv(report: SpendReport): string {
  const lines = report.rows.map((row) =>
    [csvField(row.key), decimalText(row.spend_usd), row.tokens, row.calls, row.unpriced_calls].join(','),
  );
  return [SPEND_REPORT_CSV_HEADER, ...lines].map((line) => `${line}\r\n`).join('');
}
