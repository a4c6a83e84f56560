/** Workspace settings (a table of fields), the plan, the kill switch, and the account's password. */
import { useEffect, useState } from 'preact/hooks';
import { api, ApiError, type Billing, type Me, type Workspace } from '../api';
import { Card, Confirm, ErrorNote } from '../components';
import { useLoad } from '../hooks';
import { limit } from '../format';
import { fromText, toText, WORKSPACE_FIELDS } from '../settings-fields';
import { clearToken } from '../session';
import { useLocation } from 'wouter-preact';

function WorkspaceForm({ workspace, onSaved }: { workspace: Workspace; onSaved: () => void }) {
  const fields = WORKSPACE_FIELDS.filter((f) => f.key in workspace);
  const initial = (from: Workspace = workspace) => Object.fromEntries(fields.map((f) => [f.key, toText(from[f.key])]));
  const [values, setValues] = useState<Record<string, string>>(initial);
  // Typed since the last save: a reload of the workspace (polled, or after a write) must not undo it.
  const [edited, setEdited] = useState(false);
  const [error, setError] = useState<Error | null>(null);
  const [status, setStatus] = useState('');
  // What the daemon holds as far as this form knows: the newer of the last load and the last save.
  const [base, setBase] = useState(workspace);
  useEffect(() => {
    if (workspace.updated_at >= base.updated_at) setBase(workspace);
    if (!edited) setValues(initial());
  }, [workspace.updated_at]);

  const save = async (event: Event) => {
    event.preventDefault();
    setError(null);
    setStatus('');
    try {
      const changes: Record<string, unknown> = {};
      for (const field of fields) {
        const value = fromText(field, values[field.key] ?? '');
        if (toText(value) !== toText(base[field.key])) changes[field.key] = value;
      }
      if (Object.keys(changes).length === 0) return setStatus('Nothing changed.');
      const saved = await api<Workspace>('PATCH', '/v1/workspace', changes);
      setEdited(false);
      setBase(saved);
      setValues(initial(saved));
      setStatus('Saved.');
      onSaved();
    } catch (e) {
      setError(e as Error);
    }
  };

  return (
    <form onSubmit={save} class="settings">
      <table class="fields">
        <caption class="sr-only">Workspace settings</caption>
        <tbody>
          {fields.map((field) => {
            const id = `setting-${field.key}`;
            const value = values[field.key] ?? '';
            const set = (text: string) => {
              setEdited(true);
              setValues({ ...values, [field.key]: text });
            };
            return (
              <tr key={field.key}>
                <th scope="row">
                  <label for={id}>{field.label}</label>
                </th>
                <td>
                  {field.kind === 'choice' ? (
                    <select
                      id={id}
                      value={value}
                      onChange={(e) => set(e.currentTarget.value)}
                      aria-describedby={`${id}-help`}
                    >
                      {field.options.map((o) => (
                        <option key={o.value} value={o.value}>
                          {o.label}
                        </option>
                      ))}
                    </select>
                  ) : (
                    <input
                      id={id}
                      value={value}
                      inputMode={field.kind === 'text' ? 'text' : 'decimal'}
                      placeholder={field.kind === 'text' ? '' : 'unlimited'}
                      aria-describedby={`${id}-help`}
                      onInput={(e) => set(e.currentTarget.value)}
                    />
                  )}
                </td>
                <td id={`${id}-help`} class="muted">
                  {field.help}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
      <div class="actions">
        <button type="submit" class="primary">
          Save settings
        </button>
        <span role="status">{status}</span>
      </div>
      <ErrorNote error={error} />
    </form>
  );
}

/**
 * Keyed by the current plan (a change starts the card over): an effect resetting the choice would
 * also run just after the first paint, and undo a choice made in that moment.
 */
function PlanCard({ billing, onChanged }: { billing: Billing; onChanged: () => void }) {
  const [plan, setPlan] = useState(billing.plan);
  const [error, setError] = useState<ApiError | null>(null);
  const change = async (event: Event) => {
    event.preventDefault();
    setError(null);
    try {
      await api('POST', '/v1/billing/plan', { plan });
      onChanged();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <Card title="Plan">
      <table>
        <caption class="sr-only">Plans and their ceilings</caption>
        <thead>
          <tr>
            <th scope="col">Plan</th>
            <th scope="col" class="num">
              Monthly runs
            </th>
            <th scope="col" class="num">
              Concurrent runs
            </th>
            <th scope="col">Kill switch</th>
          </tr>
        </thead>
        <tbody>
          {billing.plans.map((p) => (
            <tr key={p.name} class={p.name === billing.plan ? 'current' : ''}>
              <td>
                {p.name}
                {p.name === billing.plan && <strong> (current)</strong>}
              </td>
              <td class="num">{limit(p.monthly_run_limit)}</td>
              <td class="num">{limit(p.max_concurrent_runs)}</td>
              <td>{p.kill_switch ? 'yes' : 'no'}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <form class="inline" onSubmit={change}>
        <label>
          Plan
          <select value={plan} onChange={(e) => setPlan(e.currentTarget.value)}>
            {billing.plans.map((p) => (
              <option key={p.name} value={p.name}>
                {p.name}
              </option>
            ))}
          </select>
        </label>
        <button type="submit" disabled={plan === billing.plan}>
          Change plan
        </button>
      </form>
      <p class="muted">Self-hosted: the plan is the licence tier. A lower plan lowers limits above its ceilings.</p>
      <ErrorNote error={error} />
    </Card>
  );
}

function KillSwitchCard({
  workspace,
  billing,
  onChanged,
}: {
  workspace: Workspace;
  billing: Billing | null;
  onChanged: () => void;
}) {
  const [asking, setAsking] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const on = workspace.kill_switch_active;
  const flip = async () => {
    setAsking(false);
    setError(null);
    try {
      await api('POST', '/v1/workspace/kill-switch', { active: !on });
      onChanged();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  const available = billing ? billing.limits.kill_switch : true;
  return (
    <Card title="Kill switch" id="kill-switch">
      <p>
        The kill switch is <strong class={on ? 'deny-text' : 'ok-text'}>{on ? 'ON' : 'OFF'}</strong>. While on, every
        run start and step of this workspace is denied.
      </p>
      {available || on ? (
        <button type="button" class={on ? 'primary' : 'danger'} onClick={() => setAsking(true)}>
          {on ? 'Turn the kill switch off' : 'Turn the kill switch on'}
        </button>
      ) : (
        // What the API's 403 says, without a button that could only fail.
        <p class="notice" role="note">
          The kill switch needs the scale plan or higher; this workspace is on {workspace.plan}.
        </p>
      )}
      <ErrorNote error={error} />
      <Confirm
        open={asking}
        title={on ? 'Turn the kill switch off?' : 'Turn the kill switch on?'}
        confirmLabel={on ? 'Turn off' : 'Turn on: deny everything'}
        danger={!on}
        onConfirm={() => void flip()}
        onCancel={() => setAsking(false)}
      >
        <p>
          {on
            ? 'Runs and steps will be decided by the other rules again.'
            : 'Every run start and every step of every user will be denied until it is turned off.'}
        </p>
      </Confirm>
    </Card>
  );
}

function PasswordCard({ me }: { me: Me }) {
  const [, navigate] = useLocation();
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  if (me.email === null) return null;
  const change = async (event: Event) => {
    event.preventDefault();
    setError(null);
    try {
      await api('POST', '/v1/auth/password', { current_password: current, new_password: next });
      // Every token issued before the change stops working, this one too: sign in again.
      clearToken();
      navigate('/sign-in');
      location.reload();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <Card title="Your password">
      <form class="inline" onSubmit={change}>
        <input type="email" autoComplete="username" value={me.email} readOnly hidden />
        <label>
          Current password{' '}
          <input
            type="password"
            autoComplete="current-password"
            required
            value={current}
            onInput={(e) => setCurrent(e.currentTarget.value)}
          />
        </label>
        <label>
          New password{' '}
          <input
            type="password"
            autoComplete="new-password"
            minLength={8}
            required
            value={next}
            onInput={(e) => setNext(e.currentTarget.value)}
          />
        </label>
        <button type="submit">Change password</button>
      </form>
      <p class="muted">Changing it signs out every session of this account, this one included.</p>
      <ErrorNote error={error} />
    </Card>
  );
}

export function SettingsPage({ me }: { me: Me }) {
  const workspace = useLoad(() => api<Workspace>('GET', '/v1/workspace'), [], 2000);
  const billing = useLoad(() => api<Billing>('GET', '/v1/billing'), []);
  const reload = () => {
    void workspace.reload();
    void billing.reload();
  };
  return (
    <>
      <h1>Settings</h1>
      <ErrorNote error={workspace.error ?? billing.error} />
      {workspace.data && (
        <>
          <KillSwitchCard workspace={workspace.data} billing={billing.data} onChanged={reload} />
          <Card title="Budgets and limits">
            <WorkspaceForm workspace={workspace.data} onSaved={reload} />
          </Card>
        </>
      )}
      {billing.data && <PlanCard key={billing.data.plan} billing={billing.data} onChanged={reload} />}
      <PasswordCard me={me} />
    </>
  );
}
