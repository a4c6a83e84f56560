/**
 * Signing in: a one-time link (`runguard dashboard`; its token is in the URL's fragment), or
 * email and password; or creating an account (a new workspace on the basic plan).
 */
import { useEffect, useState } from 'preact/hooks';
import { api, ApiError, type TokenAnswer } from '../api';
import { setToken } from '../session';
import { ErrorNote } from '../components';
import { KeyOnce } from './api-keys';

export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [mode, setMode] = useState<'login' | 'register'>('login');
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const [newKey, setNewKey] = useState<string | null>(null);

  useEffect(() => {
    const token = new URLSearchParams(location.hash.slice(1)).get('token');
    if (!token) return;
    // Out of the address bar and the history at once: the link is used up either way.
    history.replaceState(null, '', '/sign-in');
    setBusy(true);
    api<TokenAnswer & { owner_set: boolean }>('POST', '/v1/auth/sign-in-links/redeem', { token }, null).then(
      (answer) => {
        setToken(answer.access_token);
        onSignedIn();
      },
      (e: ApiError) => {
        setError(e);
        setBusy(false);
      },
    );
  }, []);

  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      if (mode === 'login') {
        const answer = await api<TokenAnswer>('POST', '/v1/auth/login', { email, password }, null);
        setToken(answer.access_token);
        onSignedIn();
      } else {
        const answer = await api<TokenAnswer & { api_key: string }>(
          'POST',
          '/v1/auth/register',
          { email, password },
          null,
        );
        setToken(answer.access_token);
        setNewKey(answer.api_key);
      }
    } catch (e) {
      setError(e as ApiError);
    } finally {
      setBusy(false);
    }
  };

  if (newKey) {
    return (
      <main id="main" class="sign-in">
        <h1>Account created</h1>
        <KeyOnce
          apiKey={newKey}
          onDone={() => {
            setNewKey(null);
            onSignedIn();
          }}
        />
      </main>
    );
  }

  return (
    <main id="main" class="sign-in">
      <h1>{mode === 'login' ? 'Sign in to runguard' : 'Create a runguard account'}</h1>
      <form onSubmit={submit} class="stack">
        <label>
          Email{' '}
          <input
            type="email"
            name="email"
            autoComplete="username"
            required
            value={email}
            onInput={(e) => setEmail(e.currentTarget.value)}
          />
        </label>
        <label>
          Password{' '}
          <input
            type="password"
            name="password"
            autoComplete={mode === 'login' ? 'current-password' : 'new-password'}
            required
            minLength={mode === 'register' ? 8 : undefined}
            value={password}
            onInput={(e) => setPassword(e.currentTarget.value)}
          />
        </label>
        <button type="submit" class="primary" disabled={busy}>
          {mode === 'login' ? 'Sign in' : 'Create account'}
        </button>
        <ErrorNote error={error} />
      </form>
      <p>
        {mode === 'login' ? (
          <button type="button" class="link" onClick={() => setMode('register')}>
            Create an account (a new workspace)
          </button>
        ) : (
          <button type="button" class="link" onClick={() => setMode('login')}>
            I have an account: sign in
          </button>
        )}
      </p>
      <p class="muted">
        First time on this daemon? Run <code>npx runguard dashboard</code> on its machine: it prints a one-time link
        that signs you in to the workspace the daemon created.
      </p>
    </main>
  );
}
