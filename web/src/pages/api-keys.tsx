/** API keys: listed without secrets; regenerating shows the new key once, then forgets it. */
import { useState } from 'preact/hooks';
import { api, ApiError, type ApiKey } from '../api';
import { Card, Confirm, ErrorNote, SecretOnce } from '../components';
import { useLoad } from '../hooks';
import { when } from '../format';

/** A new API key, shown once (SecretOnce). */
export function KeyOnce({ apiKey, onDone }: { apiKey: string; onDone: () => void }) {
  return (
    <SecretOnce id="new-key" title="Your new API key" label="New API key" secret={apiKey} onDone={onDone}>
      It is shown this once: copy it now. Every earlier key of the workspace no longer works.
    </SecretOnce>
  );
}

export function ApiKeysPage() {
  const keys = useLoad(() => api<ApiKey[]>('GET', '/v1/api-keys'), []);
  const [asking, setAsking] = useState(false);
  const [fresh, setFresh] = useState<string | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const regenerate = async () => {
    setAsking(false);
    setError(null);
    try {
      const answer = await api<{ api_key: string }>('POST', '/v1/api-keys/regenerate');
      setFresh(answer.api_key);
      void keys.reload();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <>
      <h1>API keys</h1>
      {fresh && <KeyOnce apiKey={fresh} onDone={() => setFresh(null)} />}
      <Card title="Keys">
        <ErrorNote error={keys.error ?? error} />
        {keys.data && (
          <table>
            <caption class="sr-only">API keys of this workspace (prefixes only)</caption>
            <thead>
              <tr>
                <th scope="col">Prefix</th>
                <th scope="col">Name</th>
                <th scope="col">Created</th>
                <th scope="col">Last used</th>
                <th scope="col">State</th>
              </tr>
            </thead>
            <tbody>
              {keys.data.map((k) => (
                <tr key={k.id}>
                  <td>
                    <code>lg_{k.prefix}_…</code>
                  </td>
                  <td>{k.name ?? '—'}</td>
                  <td>{when(k.created_at)}</td>
                  <td>{when(k.last_used_at)}</td>
                  <td>
                    {k.revoked_at ? (
                      <span class="badge badge-failed">revoked {when(k.revoked_at)}</span>
                    ) : (
                      <span class="badge badge-completed">active</span>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
        <div class="actions">
          <button type="button" class="danger" onClick={() => setAsking(true)}>
            Regenerate key
          </button>
        </div>
      </Card>
      <Confirm
        open={asking}
        title="Regenerate the API key?"
        confirmLabel="Regenerate"
        danger
        onConfirm={() => void regenerate()}
        onCancel={() => setAsking(false)}
      >
        <p>
          A new key is issued and every earlier key stops working at once: agents and scripts using them will be refused
          until they get the new one. The daemon's local key file is updated.
        </p>
      </Confirm>
    </>
  );
}
