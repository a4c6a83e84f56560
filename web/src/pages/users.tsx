/** SDK users: search, today's spend against budget, block and unblock, per-user budgets. */
import { useState } from 'preact/hooks';
import { Link } from 'wouter-preact';
import { api, ApiError, qs, type Page, type SdkUser } from '../api';
import { ErrorNote, Pager } from '../components';
import { useLoad } from '../hooks';
import { int, limit, usd, when } from '../format';

const PER_PAGE = 25;

/** A budget field's text as the API's value: empty is "no override" (null). */
export function parseUsd(text: string): number | null {
  const trimmed = text.trim();
  if (trimmed === '') return null;
  if (!/^\d+(\.\d+)?$/.test(trimmed)) throw new Error('Enter an amount in USD, like 5 or 0.25, or leave it empty.');
  return Number(trimmed);
}

function UserRow({
  user,
  workspaceDefault,
  onChanged,
}: {
  user: SdkUser;
  workspaceDefault: string;
  onChanged: () => void;
}) {
  const [budget, setBudget] = useState(user.daily_budget_usd === null ? '' : String(user.daily_budget_usd));
  const [error, setError] = useState<Error | null>(null);
  const [saved, setSaved] = useState(false);
  const put = async (body: Record<string, unknown>) => {
    setError(null);
    setSaved(false);
    try {
      await api('PUT', `/v1/users/${encodeURIComponent(user.user_id)}`, body);
      setSaved(true);
      onChanged();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  const saveBudget = (event: Event) => {
    event.preventDefault();
    try {
      void put({ daily_budget_usd: parseUsd(budget) });
    } catch (e) {
      setError(e as Error);
    }
  };
  const inputId = `budget-${user.user_id}`;
  return (
    <tr data-user-id={user.user_id}>
      <td>
        <Link href={`/runs?user_id=${encodeURIComponent(user.user_id)}`}>{user.user_id}</Link>
      </td>
      <td>
        {user.blocked ? (
          <span class="badge badge-blocked">Blocked</span>
        ) : (
          <span class="badge badge-completed">Active</span>
        )}
      </td>
      <td class="num">
        {usd(user.daily_spend_usd)} of {user.daily_budget_usd === null ? workspaceDefault : usd(user.daily_budget_usd)}
      </td>
      <td class="num">{int(user.run_count)}</td>
      <td>{when(user.last_seen_at)}</td>
      <td>
        <form class="inline" onSubmit={saveBudget}>
          <label class="sr-only" for={inputId}>
            Daily budget in USD for {user.user_id}
          </label>
          <input
            id={inputId}
            class="narrow"
            inputMode="decimal"
            placeholder="default"
            value={budget}
            onInput={(e) => setBudget(e.currentTarget.value)}
          />
          <button type="submit">Save budget</button>
        </form>
      </td>
      <td>
        <button type="button" class={user.blocked ? '' : 'danger'} onClick={() => void put({ blocked: !user.blocked })}>
          {user.blocked ? 'Unblock' : 'Block'}
          <span class="sr-only"> {user.user_id}</span>
        </button>
        {saved && (
          <span class="sr-only" role="status">
            Saved
          </span>
        )}
        <ErrorNote error={error} />
      </td>
    </tr>
  );
}

export function UsersPage() {
  const [search, setSearch] = useState('');
  const [applied, setApplied] = useState('');
  const [blocked, setBlocked] = useState('');
  const [page, setPage] = useState(1);
  const users = useLoad(
    () => api<Page<SdkUser>>('GET', `/v1/users${qs({ search: applied, blocked, page, per_page: PER_PAGE })}`),
    [applied, blocked, page],
    2000,
  );
  const workspace = useLoad(() => api<{ user_daily_budget_usd: number | null }>('GET', '/v1/workspace'), []);
  const workspaceDefault = `${limit(workspace.data?.user_daily_budget_usd ?? null, usd)} (default)`;
  const [newUser, setNewUser] = useState('');
  const [blockError, setBlockError] = useState<ApiError | null>(null);
  return (
    <>
      <h1>Users</h1>
      <div class="toolbar">
        <form
          class="filters"
          role="search"
          onSubmit={(e) => {
            e.preventDefault();
            setPage(1);
            setApplied(search.trim());
          }}
        >
          <label>
            Search user ids <input type="search" value={search} onInput={(e) => setSearch(e.currentTarget.value)} />
          </label>
          <label>
            Show
            <select
              value={blocked}
              onChange={(e) => {
                setPage(1);
                setBlocked(e.currentTarget.value);
              }}
            >
              <option value="">All users</option>
              <option value="true">Blocked</option>
              <option value="false">Not blocked</option>
            </select>
          </label>
          <button type="submit" class="primary">
            Search
          </button>
        </form>
        <form
          class="filters"
          onSubmit={async (e) => {
            e.preventDefault();
            setBlockError(null);
            try {
              await api('PUT', `/v1/users/${encodeURIComponent(newUser.trim())}`, { blocked: true });
              setNewUser('');
              void users.reload();
            } catch (error) {
              setBlockError(error as ApiError);
            }
          }}
        >
          <label>
            Block a user not seen yet{' '}
            <input value={newUser} required onInput={(e) => setNewUser(e.currentTarget.value)} />
          </label>
          <button type="submit" class="danger">
            Block
          </button>
          <ErrorNote error={blockError} />
        </form>
      </div>
      <ErrorNote error={users.error} />
      {users.data && (
        <>
          <table>
            <caption class="sr-only">SDK users, most recently seen first</caption>
            <thead>
              <tr>
                <th scope="col">User</th>
                <th scope="col">State</th>
                <th scope="col" class="num">
                  Spend today of budget
                </th>
                <th scope="col" class="num">
                  Runs
                </th>
                <th scope="col">Last seen</th>
                <th scope="col">Daily budget (USD)</th>
                <th scope="col">Action</th>
              </tr>
            </thead>
            <tbody>
              {users.data.items.length === 0 && (
                <tr>
                  <td colSpan={7} class="muted">
                    No users match.
                  </td>
                </tr>
              )}
              {users.data.items.map((u) => (
                <UserRow
                  key={`${u.user_id}:${u.daily_budget_usd}`}
                  user={u}
                  workspaceDefault={workspaceDefault}
                  onChanged={() => void users.reload()}
                />
              ))}
            </tbody>
          </table>
          <Pager label="Users" page={page} perPage={PER_PAGE} total={users.data.total} onPage={setPage} />
        </>
      )}
    </>
  );
}
