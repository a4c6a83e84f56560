/**
 * The dashboard's session: the JWT in sessionStorage. It survives a reload of the tab, is not
 * shared with other tabs, and is gone when the tab closes. Not a cookie: the API takes bearer
 * tokens only (as every client), and a cookie would bring CSRF with it. Sign-out and a password
 * change also end the token on the server (its account's token version moves on).
 */
const KEY = 'runguard.session';

export function getToken(): string | null {
  try {
    return sessionStorage.getItem(KEY);
  } catch {
    return null;
  }
}

export function setToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function clearToken(): void {
  sessionStorage.removeItem(KEY);
}
