/**
 * Budgets (`/v1/budgets`, docs/budgets.md): each budget's spend this period against its limit, what
 * it does when spent (deny, or only alert), and when its window resets; add and delete them.
 */
import { useState } from 'preact/hooks';
import { api, ApiError, type ApiKey, type Budget, type BudgetCreateBody } from '../api';
import { Confirm, ErrorNote } from '../components';
import { useLoad } from '../hooks';
import { share, usd, when } from '../format';
import { parseUsd } from './users';

const PERIOD_NAMES: Record<Budget['period'], string> = { day: 'Day', week: 'Week (from Monday)', month: 'Month' };
const SUBJECT_HINTS: Record<Budget['scope'], string> = {
  workspace: '',
  user: 'the SDK user id',
  key: 'the API key id',
  tag: 'a tag key:value',
};

/** "in 3 d 4 h", "in 42 min": how soon a window ends, beside its UTC instant. */
function fromNow(iso: string): string {
  const minutes = Math.max(0, Math.round((Date.parse(iso) - Date.now()) / 60_000));
  if (minutes < 60) return `in ${minutes} min`;
  const hours = Math.floor(minutes / 60);
  return hours < 24 ? `in ${hours} h ${minutes % 60} min` : `in ${Math.floor(hours / 24)} d ${hours % 24} h`;
}

function whose(budget: Budget): string {
  return budget.scope === 'workspace' ? 'Workspace' : `${budget.scope} ${budget.subject ?? ''}`;
}

/** A key as people know it: its name and prefix (its id is what a budget stores). */
const keyName = (key: ApiKey): string => `${key.name ?? 'unnamed'} (${key.prefix})`;

/** Spend against the limit as a bar, with its numbers in words (the bar alone says nothing to a screen reader). */
function SpendBar({ budget }: { budget: Budget }) {
  const fraction = share(budget.spend_usd, budget.limit_usd) ?? 0;
  const level = fraction >= 1 ? 'over' : fraction >= 0.8 ? 'high' : 'ok';
  const percent = budget.limit_usd === 0 ? '' : ` (${Math.round((budget.spend_usd / budget.limit_usd) * 100)}%)`;
  const text = `${usd(budget.spend_usd)} of ${usd(budget.limit_usd)}${percent}`;
  return (
    <div class="budget-spend">
      <span>{text}</span>
      <progress
        class={`meter-bar meter-${level}`}
        max={1}
        value={fraction}
        aria-label={`${whose(budget)} ${budget.period}: ${text}`}
      />
    </div>
  );
}

function AddBudget({ keys }: { keys: ApiKey[] }) {
  const [scope, setScope] = useState<Budget['scope']>('user');
  const [subject, setSubject] = useState('');
  const [period, setPeriod] = useState<Budget['period']>('month');
  const [limit, setLimit] = useState('');
  const [action, setAction] = useState<Budget['action']>('deny');
  const [error, setError] = useState<Error | null>(null);
  const submit = async (event: Event) => {
    event.preventDefault();
    setError(null);
    try {
      const limitUsd = parseUsd(limit);
      if (limitUsd === null) throw new Error('Enter the limit in USD, like 50 or 2.5.');
      const body: BudgetCreateBody = { scope, period, limit_usd: limitUsd, action };
      if (scope !== 'workspace') body.subject = subject.trim();
      await api<Budget>('POST', '/v1/budgets', body);
      setSubject('');
      setLimit('');
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <form class="inline budget-form" onSubmit={submit} aria-label="Add a budget">
      <label>
        Scope
        <select
          value={scope}
          onChange={(e) => {
            // A user id is no key id (nor a tag): each scope's subject is entered anew.
            setScope(e.currentTarget.value as Budget['scope']);
            setSubject('');
          }}
        >
          <option value="workspace">Workspace</option>
          <option value="user">User</option>
          <option value="key">API key</option>
          <option value="tag">Tag</option>
        </select>
      </label>
      {scope === 'key' && (
        <label>
          Subject
          <select required value={subject} onChange={(e) => setSubject(e.currentTarget.value)}>
            <option value="">Choose a key</option>
            {keys.map((key) => (
              <option key={key.id} value={key.id}>
                {keyName(key)}
              </option>
            ))}
          </select>
        </label>
      )}
      {scope !== 'workspace' && scope !== 'key' && (
        <label>
          Subject
          <input
            required
            maxLength={256}
            placeholder={SUBJECT_HINTS[scope]}
            value={subject}
            onInput={(e) => setSubject(e.currentTarget.value)}
          />
        </label>
      )}
      <label>
        Period
        <select value={period} onChange={(e) => setPeriod(e.currentTarget.value as Budget['period'])}>
          {(Object.keys(PERIOD_NAMES) as Budget['period'][]).map((p) => (
            <option key={p} value={p}>
              {PERIOD_NAMES[p]}
            </option>
          ))}
        </select>
      </label>
      <label>
        Limit (USD)
        <input
          class="narrow"
          required
          inputMode="decimal"
          value={limit}
          onInput={(e) => setLimit(e.currentTarget.value)}
        />
      </label>
      <label>
        When spent
        <select value={action} onChange={(e) => setAction(e.currentTarget.value === 'alert' ? 'alert' : 'deny')}>
          <option value="deny">Deny (hard)</option>
          <option value="alert">Alert only (soft)</option>
        </select>
      </label>
      <button type="submit" class="primary">
        Add budget
      </button>
      <ErrorNote error={error} />
    </form>
  );
}

export function BudgetsPage() {
  const budgets = useLoad(() => api<Budget[]>('GET', '/v1/budgets'), [], 2000);
  // Key budgets name a key by its id: shown and chosen by its name and prefix.
  const keys = useLoad(() => api<ApiKey[]>('GET', '/v1/api-keys'), []);
  const activeKeys = (keys.data ?? []).filter((key) => key.revoked_at === null);
  const subjectOf = (budget: Budget) => {
    const key = budget.scope === 'key' ? keys.data?.find((k) => k.id === budget.subject) : undefined;
    return key ? keyName(key) : budget.subject;
  };
  const workspace = useLoad(() => api<{ time_zone?: string }>('GET', '/v1/workspace'), []);
  const [deleting, setDeleting] = useState<Budget | null>(null);
  const [deleteError, setDeleteError] = useState<ApiError | null>(null);
  const remove = async () => {
    const budget = deleting;
    setDeleting(null);
    if (!budget) return;
    setDeleteError(null);
    try {
      await api('DELETE', `/v1/budgets/${encodeURIComponent(budget.id)}`);
    } catch (e) {
      setDeleteError(e as ApiError);
    }
  };
  const zone = workspace.data?.time_zone ?? 'UTC';
  return (
    <>
      <h1>Budgets</h1>
      <p class="muted">
        Caps on spend per day, ISO week or calendar month, in the workspace's time zone ({zone}). A deny budget denies
        the next call once spent; an alert budget never denies and sends <code>budget.threshold</code> webhook events at
        50%, 80% and 100% (see Alerts). The daily budgets of Settings apply beside these.
      </p>
      <AddBudget keys={activeKeys} />
      <ErrorNote error={budgets.error ?? deleteError} />
      {budgets.data && budgets.data.length === 0 && <p class="muted">No budgets yet.</p>}
      {budgets.data && budgets.data.length > 0 && (
        <table class="budgets">
          <caption class="sr-only">Budgets, with their spend this period</caption>
          <thead>
            <tr>
              <th scope="col">Budget</th>
              <th scope="col">Period</th>
              <th scope="col">Spend this period</th>
              <th scope="col">Action</th>
              <th scope="col">Resets</th>
              <th scope="col">Manage</th>
            </tr>
          </thead>
          <tbody>
            {budgets.data.map((budget) => (
              <tr key={budget.id} data-budget-id={budget.id}>
                <td>
                  {budget.scope === 'workspace' ? (
                    'Workspace'
                  ) : (
                    <>
                      <span class="muted">{budget.scope}</span> <code>{subjectOf(budget)}</code>
                    </>
                  )}
                </td>
                <td>{budget.period}</td>
                <td>
                  <SpendBar budget={budget} />
                </td>
                <td>
                  {budget.action === 'deny' ? (
                    <span class="badge badge-blocked">deny</span>
                  ) : (
                    <span class="badge badge-failed">alert</span>
                  )}
                </td>
                <td>
                  {when(budget.resets_at)} <span class="muted">({fromNow(budget.resets_at)})</span>
                </td>
                <td>
                  <button type="button" class="danger" onClick={() => setDeleting(budget)}>
                    Delete
                    <span class="sr-only">
                      {' '}
                      the {budget.period} budget of {whose(budget)}
                    </span>
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <Confirm
        open={deleting !== null}
        title="Delete this budget?"
        confirmLabel="Delete budget"
        danger
        onConfirm={() => void remove()}
        onCancel={() => setDeleting(null)}
      >
        The {deleting?.period} budget of {deleting ? whose(deleting) : ''} stops applying at the next decision, calls in
        flight included.
      </Confirm>
    </>
  );
}
