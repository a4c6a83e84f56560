/** Offered after a sign-in link: name the workspace owner's email and password (once). */
import { useState } from 'preact/hooks';
import { api, ApiError, type TokenAnswer } from '../api';
import { setToken } from '../session';
import { ErrorNote } from '../components';

export function OwnerForm({ onDone }: { onDone: () => void }) {
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState<ApiError | null>(null);
  const submit = async (event: Event) => {
    event.preventDefault();
    setError(null);
    try {
      // The answer is a new token: the link's session ended with the owner's naming.
      const answer = await api<TokenAnswer>('POST', '/v1/auth/owner', { email, password });
      setToken(answer.access_token);
      onDone();
    } catch (e) {
      setError(e as ApiError);
    }
  };
  return (
    <section class="banner banner-info" aria-labelledby="owner-title">
      <h2 id="owner-title">Set an owner email and password</h2>
      <p>You signed in with a one-time link. Set an email and password to sign in again without one.</p>
      <form class="inline" onSubmit={submit}>
        <label>
          Owner email{' '}
          <input
            type="email"
            autoComplete="username"
            required
            value={email}
            onInput={(e) => setEmail(e.currentTarget.value)}
          />
        </label>
        <label>
          Password (8 or more characters){' '}
          <input
            type="password"
            autoComplete="new-password"
            required
            minLength={8}
            value={password}
            onInput={(e) => setPassword(e.currentTarget.value)}
          />
        </label>
        <button type="submit" class="primary">
          Set owner
        </button>
      </form>
      <ErrorNote error={error} />
    </section>
  );
}
