/** Runs, newest first: filters in the address (so a filtered list can be linked), paging, live. */
import { useState } from 'preact/hooks';
import { Link, useLocation, useSearch } from 'wouter-preact';
import { api, qs, type Page, type RunSummary } from '../api';
import { ErrorNote, Pager, Status, TableHead, Tags, type ColumnHead } from '../components';
import { useLoad } from '../hooks';
import { costWithUnpriced, int, when } from '../format';

const PER_PAGE = 25;
const STATUSES = ['RUNNING', 'COMPLETED', 'FAILED', 'BLOCKED'];
const RUN_COLUMNS: ColumnHead[] = [
  { header: 'Run' },
  { header: 'User' },
  { header: 'Tags' },
  { header: 'Status' },
  { header: 'Started' },
  { header: 'Steps', numeric: true },
  { header: 'Tokens', numeric: true },
  { header: 'Cost', numeric: true },
];

/** `datetime-local` holds no zone: the dashboard shows and takes times in UTC. */
const toInput = (iso: string | null) => (iso ? iso.slice(0, 16) : '');
const fromInput = (value: string) => (value ? `${value}:00Z` : '');

type Filter = { status: string; user_id: string; started_from: string; started_before: string };

export function RunsPage() {
  const searchText = useSearch();
  const search = new URLSearchParams(searchText);
  const [, navigate] = useLocation();
  const filter: Filter = {
    status: search.get('status') ?? '',
    user_id: search.get('user_id') ?? '',
    started_from: search.get('started_from') ?? '',
    started_before: search.get('started_before') ?? '',
  };
  const page = Math.max(1, Number(search.get('page') ?? 1) || 1);

  const runs = useLoad(
    () => api<Page<RunSummary>>('GET', `/v1/runs${qs({ ...filter, page, per_page: PER_PAGE })}`),
    [JSON.stringify(filter), page],
    1500,
  );
  const go = (next: Filter, nextPage = 1) =>
    navigate(`/runs${qs({ ...next, page: nextPage > 1 ? nextPage : undefined })}`);

  return (
    <>
      <h1>Runs</h1>
      {/* Keyed by the address: the form starts over from it when it changes (an effect copying it
          would also run just after the first paint, and undo what was typed in that moment). */}
      <RunFilters key={searchText} filter={filter} go={go} />
      <ErrorNote error={runs.error} />
      <p class="muted live" aria-live="off">
        Updates every 1.5 s.
      </p>
      {runs.data && (
        <>
          <table class="runs">
            <caption class="sr-only">Runs, newest first</caption>
            <TableHead columns={RUN_COLUMNS} />
            <tbody>
              {runs.data.items.length === 0 && (
                <tr>
                  <td colSpan={RUN_COLUMNS.length} class="muted">
                    No runs match.
                  </td>
                </tr>
              )}
              {runs.data.items.map((r) => (
                <tr key={r.id} data-run-id={r.id}>
                  <td>
                    <Link href={`/runs/${r.id}`}>
                      <code>{r.id}</code>
                    </Link>
                  </td>
                  <td>{r.user_id}</td>
                  <td>
                    <Tags tags={r.tags} />
                  </td>
                  <td>
                    <Status value={r.status} />
                  </td>
                  <td>{when(r.started_at)}</td>
                  <td class="num">{int(r.step_count)}</td>
                  <td class="num">{int(r.total_tokens)}</td>
                  <td class="num">{costWithUnpriced(r.total_cost_usd, r.unpriced_calls)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <Pager label="Runs" page={page} perPage={PER_PAGE} total={runs.data.total} onPage={(p) => go(filter, p)} />
        </>
      )}
    </>
  );
}

function RunFilters({ filter, go }: { filter: Filter; go: (next: Filter) => void }) {
  const [draft, setDraft] = useState(filter);
  return (
    <form
      class="filters"
      onSubmit={(e) => {
        e.preventDefault();
        go(draft);
      }}
      aria-label="Filter runs"
    >
      <label>
        Status
        <select value={draft.status} onChange={(e) => setDraft({ ...draft, status: e.currentTarget.value })}>
          <option value="">Any</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
      </label>
      <label>
        User id{' '}
        <input
          type="search"
          value={draft.user_id}
          onInput={(e) => setDraft({ ...draft, user_id: e.currentTarget.value })}
        />
      </label>
      <label>
        Started from (UTC){' '}
        <input
          type="datetime-local"
          value={toInput(draft.started_from)}
          onInput={(e) => setDraft({ ...draft, started_from: fromInput(e.currentTarget.value) })}
        />
      </label>
      <label>
        Started before (UTC){' '}
        <input
          type="datetime-local"
          value={toInput(draft.started_before)}
          onInput={(e) => setDraft({ ...draft, started_before: fromInput(e.currentTarget.value) })}
        />
      </label>
      <button type="submit" class="primary">
        Apply
      </button>
      <button type="button" onClick={() => go({ status: '', user_id: '', started_from: '', started_before: '' })}>
        Clear
      </button>
    </form>
  );
}
