/**
 * Alerts: the workspace's webhook endpoints (docs/webhooks.md). Adding one shows its signing secret
 * once; each can be enabled, disabled, pinged and deleted; its recent deliveries can be replayed.
 */
import { useState } from 'preact/hooks';
import {
  api,
  ApiError,
  qs,
  type CreatedWebhookEndpoint,
  type Page,
  type WebhookDelivery,
  type WebhookEndpoint,
  type WebhookEventType,
  type WebhookPing,
} from '../api';
import { Card, Confirm, ErrorNote, Pager, SecretOnce, Status } from '../components';
import { useLoad } from '../hooks';
import { when } from '../format';

const PER_PAGE = 25;

/** Every event type the API takes, with what it means (the type checks that none is missing). */
const EVENTS: Record<WebhookEventType, string> = {
  'budget.threshold': 'a budget reaches 50%, 80% or 100% of its limit',
  'guard.denied': 'the guard denies run starts or steps',
  'tool.denied': 'the guard denies tool calls (counted per tool)',
  'kill_switch.changed': 'the kill switch is turned on or off',
  'user.blocked': 'a user is blocked',
  'user.unblocked': 'a user is unblocked',
  'settings.changed': 'a setting, the plan, a user budget or a price changes',
  'run.failed': 'a run fails (one event per run)',
  'result.lost': 'a call’s result was lost when a daemon died',
};
const EVENT_TYPES = Object.keys(EVENTS) as WebhookEventType[];
/** What the API subscribes an endpoint to when it names no events: all but run.failed. */
const DEFAULT_EVENTS = EVENT_TYPES.filter((e) => e !== 'run.failed');

function pingText(ping: WebhookPing): string {
  const answer = ping.status_code === null ? 'no answer' : `HTTP ${ping.status_code}`;
  return ping.ok
    ? `Test ping delivered: ${answer} in ${ping.latency_ms} ms.`
    : `Test ping failed: ${answer}${ping.error ? ` (${ping.error})` : ''} after ${ping.latency_ms} ms.`;
}

function CreateForm({ onCreated }: { onCreated: (created: CreatedWebhookEndpoint) => void }) {
  const [url, setUrl] = useState('');
  const [description, setDescription] = useState('');
  const [format, setFormat] = useState<'standard' | 'slack'>('standard');
  const [events, setEvents] = useState<WebhookEventType[]>(DEFAULT_EVENTS);
  const [error, setError] = useState<Error | null>(null);
  const submit = async (event: Event) => {
    event.preventDefault();
    setError(null);
    if (events.length === 0) return setError(new Error('Choose at least one event.'));
    try {
      const created = await api<CreatedWebhookEndpoint>('POST', '/v1/webhooks', {
        url: url.trim(),
        events,
        format,
        description: description.trim() || null,
      });
      setUrl('');
      setDescription('');
      onCreated(created);
    } catch (e) {
      setError(e as ApiError);
    }
  };
  const toggle = (type: WebhookEventType, on: boolean) =>
    setEvents(EVENT_TYPES.filter((t) => (t === type ? on : events.includes(t))));
  return (
    <form class="stack webhook-form" onSubmit={submit}>
      <div class="inline">
        <label class="grow">
          Endpoint URL
          <input
            type="url"
            required
            placeholder="https://"
            value={url}
            onInput={(e) => setUrl(e.currentTarget.value)}
          />
        </label>
        <label>
          Format
          <select value={format} onChange={(e) => setFormat(e.currentTarget.value === 'slack' ? 'slack' : 'standard')}>
            <option value="standard">Standard Webhooks (signed JSON)</option>
            <option value="slack">Slack incoming webhook</option>
          </select>
        </label>
        <label class="grow">
          Description (optional)
          <input maxLength={500} value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
        </label>
      </div>
      <fieldset class="events">
        <legend>Events</legend>
        {EVENT_TYPES.map((type) => (
          <label class="check" key={type}>
            <input
              type="checkbox"
              checked={events.includes(type)}
              onChange={(e) => toggle(type, e.currentTarget.checked)}
            />{' '}
            <code>{type}</code> <span class="muted">{EVENTS[type]}</span>
          </label>
        ))}
      </fieldset>
      <div class="actions">
        <button type="submit" class="primary">
          Add endpoint
        </button>
      </div>
      <ErrorNote error={error} />
    </form>
  );
}

function EndpointRow({
  endpoint,
  selected,
  onSelect,
  onDelete,
}: {
  endpoint: WebhookEndpoint;
  selected: boolean;
  onSelect: () => void;
  onDelete: () => void;
}) {
  const [ping, setPing] = useState<WebhookPing | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const run = async (action: () => Promise<void>) => {
    setError(null);
    setBusy(true);
    try {
      await action();
    } catch (e) {
      setError(e as ApiError);
    } finally {
      setBusy(false);
    }
  };
  const path = `/v1/webhooks/${encodeURIComponent(endpoint.id)}`;
  const test = () =>
    run(async () => {
      setPing(null);
      setPing(await api<WebhookPing>('POST', `${path}/test`));
    });
  const setEnabled = (enabled: boolean) => run(async () => void (await api('PATCH', path, { enabled })));
  const name = endpoint.description ?? endpoint.url;
  return (
    <tr data-endpoint-id={endpoint.id} class={selected ? 'current' : ''}>
      <td class="wrap">
        <code>{endpoint.url}</code>
        {endpoint.description && <div class="muted">{endpoint.description}</div>}
      </td>
      <td>{endpoint.format === 'slack' ? 'Slack' : 'Standard'}</td>
      <td class="wrap">
        <ul class="tags" aria-label="Events">
          {endpoint.events.map((e) => (
            <li key={e}>
              <code>{e}</code>
            </li>
          ))}
        </ul>
      </td>
      <td>
        {endpoint.enabled ? (
          <span class="badge badge-completed">Enabled</span>
        ) : (
          <span class="badge badge-blocked">Disabled</span>
        )}
        {endpoint.disabled_reason && <div class="muted">{endpoint.disabled_reason}</div>}
      </td>
      <td>
        <div class="buttons">
          <button type="button" disabled={busy} onClick={() => void test()}>
            Send test<span class="sr-only"> to {name}</span>
          </button>
          <button type="button" aria-pressed={selected} onClick={onSelect}>
            Deliveries<span class="sr-only"> of {name}</span>
          </button>
          <button type="button" disabled={busy} onClick={() => void setEnabled(!endpoint.enabled)}>
            {endpoint.enabled ? 'Disable' : 'Enable'}
            <span class="sr-only"> {name}</span>
          </button>
          <button type="button" class="danger" onClick={onDelete}>
            Delete<span class="sr-only"> {name}</span>
          </button>
        </div>
        <p role="status" class={ping ? (ping.ok ? 'ok-text' : 'deny-text') : 'sr-only'}>
          {ping ? pingText(ping) : busy ? 'Working…' : ''}
        </p>
        <ErrorNote error={error} />
      </td>
    </tr>
  );
}

function Deliveries({ endpoint }: { endpoint: WebhookEndpoint }) {
  const [status, setStatus] = useState('');
  const [page, setPage] = useState(1);
  const [note, setNote] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const path = `/v1/webhooks/${encodeURIComponent(endpoint.id)}`;
  const deliveries = useLoad(
    () => api<Page<WebhookDelivery>>('GET', `${path}/deliveries${qs({ status, page, per_page: PER_PAGE })}`),
    [endpoint.id, status, page],
    2000,
  );
  const replay = async (delivery: WebhookDelivery) => {
    setError(null);
    setNote('');
    try {
      await api<{ delivery_id: string }>('POST', `${path}/deliveries/${encodeURIComponent(delivery.id)}/replay`);
      setNote(`${delivery.event_type} ${delivery.event_id} queued again, as a new delivery.`);
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <Card title={`Recent deliveries to ${endpoint.description ?? endpoint.url}`} id="deliveries">
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Delivery status
          <select
            value={status}
            onChange={(e) => {
              setPage(1);
              setStatus(e.currentTarget.value);
            }}
          >
            <option value="">All</option>
            <option value="pending">Pending</option>
            <option value="delivered">Delivered</option>
            <option value="failed">Failed</option>
          </select>
        </label>
      </form>
      <p role="status" class="muted">
        {note}
      </p>
      <ErrorNote error={deliveries.error ?? error} />
      {deliveries.data && (
        <>
          <table>
            <caption class="sr-only">Deliveries to this endpoint, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Event</th>
                <th scope="col">Status</th>
                <th scope="col" class="num">
                  Attempts
                </th>
                <th scope="col">Last answer</th>
                <th scope="col">Created</th>
                <th scope="col">Finished or next attempt</th>
                <th scope="col">Action</th>
              </tr>
            </thead>
            <tbody>
              {deliveries.data.items.length === 0 && (
                <tr>
                  <td colSpan={7} class="muted">
                    No deliveries yet.
                  </td>
                </tr>
              )}
              {deliveries.data.items.map((d) => (
                <tr key={d.id} data-delivery-id={d.id}>
                  <td>
                    <code>{d.event_type}</code>
                    <div class="muted small">{d.event_id}</div>
                  </td>
                  <td>
                    <Status value={d.status} />
                  </td>
                  <td class="num">{d.attempts}</td>
                  <td class="wrap">
                    {d.last_status_code === null ? '—' : `HTTP ${d.last_status_code}`}
                    {d.last_error && <div class="deny-text">{d.last_error}</div>}
                  </td>
                  <td>{when(d.created_at)}</td>
                  <td>{d.finished_at ? when(d.finished_at) : when(d.next_attempt_at)}</td>
                  <td>
                    <button type="button" onClick={() => void replay(d)}>
                      Replay<span class="sr-only"> {d.event_id}</span>
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <Pager label="Deliveries" page={page} perPage={PER_PAGE} total={deliveries.data.total} onPage={setPage} />
        </>
      )}
    </Card>
  );
}

export function AlertsPage() {
  const endpoints = useLoad(() => api<WebhookEndpoint[]>('GET', '/v1/webhooks'), []);
  const [created, setCreated] = useState<CreatedWebhookEndpoint | null>(null);
  const [selectedId, setSelectedId] = useState<string | null>(null);
  const [deleting, setDeleting] = useState<WebhookEndpoint | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const selected = endpoints.data?.find((e) => e.id === selectedId) ?? null;
  const remove = async () => {
    const endpoint = deleting;
    setDeleting(null);
    if (!endpoint) return;
    setError(null);
    try {
      await api('DELETE', `/v1/webhooks/${encodeURIComponent(endpoint.id)}`);
      if (selectedId === endpoint.id) setSelectedId(null);
      void endpoints.reload();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <>
      <h1>Alerts</h1>
      <p class="muted">
        runguard POSTs signed events (budget thresholds, denials, the kill switch, blocks, setting changes) to these
        endpoints. See docs/webhooks.md for the events and how to check their signatures.
      </p>
      {created && (
        <SecretOnce
          id="new-secret"
          title="The endpoint’s signing secret"
          label="Signing secret"
          secret={created.secret}
          onDone={() => setCreated(null)}
        >
          It is shown this once: copy it now, and check each request’s <code>webhook-signature</code> with it.
        </SecretOnce>
      )}
      <Card title="Endpoints">
        <ErrorNote error={endpoints.error ?? error} />
        {endpoints.data && (
          <table class="endpoints">
            <caption class="sr-only">Webhook endpoints of this workspace</caption>
            <thead>
              <tr>
                <th scope="col">URL</th>
                <th scope="col">Format</th>
                <th scope="col">Events</th>
                <th scope="col">State</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {endpoints.data.length === 0 && (
                <tr>
                  <td colSpan={5} class="muted">
                    No endpoints yet: add one below.
                  </td>
                </tr>
              )}
              {endpoints.data.map((e) => (
                <EndpointRow
                  key={e.id}
                  endpoint={e}
                  selected={e.id === selectedId}
                  onSelect={() => setSelectedId(e.id === selectedId ? null : e.id)}
                  onDelete={() => setDeleting(e)}
                />
              ))}
            </tbody>
          </table>
        )}
      </Card>
      {selected && <Deliveries key={selected.id} endpoint={selected} />}
      <Card title="Add an endpoint">
        <CreateForm
          onCreated={(endpoint) => {
            setCreated(endpoint);
            setSelectedId(endpoint.id);
            void endpoints.reload();
          }}
        />
      </Card>
      <Confirm
        open={deleting !== null}
        title="Delete this endpoint?"
        confirmLabel="Delete endpoint"
        danger
        onConfirm={() => void remove()}
        onCancel={() => setDeleting(null)}
      >
        <p>
          <code>{deleting?.url}</code> gets no more events, and its delivery log is deleted with it. This cannot be
          undone.
        </p>
      </Confirm>
    </>
  );
}
