/**
 * Runs as the API reads them back: a page of the list, and one run with its steps. The detail is
 * the JSON bytes Postgres writes (store/run-detail.ts), so a large run is sent as it is read.
 */
import type { RunListQuery, RunPage } from '../contract/index.js';
import type { Clock } from '../clock.js';
import type { Db } from '../store/db.js';
import { readRunDetail, type RunDetailBody } from '../store/run-detail.js';
import { listRuns, runStartedBy } from '../store/run-list.js';

export type { RunDetailBody };

/** `key:value` filters as pairs, split at the first `:` (a key has none). */
const tagPairs = (filters: readonly string[]): [string, string][] =>
  filters.map((filter) => [filter.slice(0, filter.indexOf(':')), filter.slice(filter.indexOf(':') + 1)]);

export class RunHistory {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  /** Newest first. */
  list(workspaceId: string, query: RunListQuery, agentKeyId: string | null = null): Promise<RunPage> {
    return listRuns(this.db, workspaceId, {
      apiKeyId: agentKeyId,
      status: query.status ?? null,
      userId: query.user_id ?? null,
      startedFrom: query.started_from ? new Date(query.started_from) : null,
      startedBefore: query.started_before ? new Date(query.started_before) : null,
      tags: query.tag ? tagPairs(query.tag) : null,
      page: query.page,
      perPage: query.per_page,
    });
  }

  /** The run's answer (`RunDetail`) as bytes, or pieces of them to send in turn; null: no such run. */
  async detail(workspaceId: string, runId: string, agentKeyId: string | null = null): Promise<RunDetailBody | null> {
    if (agentKeyId !== null && !(await runStartedBy(this.db, workspaceId, runId, agentKeyId))) return null;
    return readRunDetail(this.db, workspaceId, runId, this.clock.now());
  }
}
