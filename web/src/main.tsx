/** The runguard dashboard: sign-in, the layout, and the pages' routes. */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { Link, Route, Switch, useLocation } from 'wouter-preact';
import { api, CHANGED, whenSignedOut, type Me, type Workspace } from './api';
import { clearToken, getToken } from './session';
import { useLoad } from './hooks';
import { SignIn } from './pages/sign-in';
import { OwnerForm } from './pages/owner';
import { OverviewPage } from './pages/overview';
import { RunsPage } from './pages/runs';
import { RunDetailPage } from './pages/run-detail';
import { UsersPage } from './pages/users';
import { BudgetsPage } from './pages/budgets';
import { ToolsPage } from './pages/tools';
import { SettingsPage } from './pages/settings';
import { PricingPage } from './pages/pricing';
import { ApiKeysPage } from './pages/api-keys';
import { AlertsPage } from './pages/alerts';
import './styles.css';

const NAV: [string, string][] = [
  ['/', 'Overview'],
  ['/runs', 'Runs'],
  ['/users', 'Users'],
  ['/budgets', 'Budgets'],
  ['/tools', 'Tools'],
  ['/settings', 'Settings'],
  ['/pricing', 'Pricing'],
  ['/alerts', 'Alerts'],
  ['/api-keys', 'API keys'],
];

function Nav() {
  const [location] = useLocation();
  const current = (path: string) =>
    path === '/' ? location === '/' : location === path || location.startsWith(`${path}/`);
  return (
    <nav aria-label="Pages">
      <ul>
        {NAV.map(([path, label]) => (
          <li key={path}>
            <Link href={path} aria-current={current(path) ? 'page' : undefined}>
              {label}
            </Link>
          </li>
        ))}
      </ul>
    </nav>
  );
}

/** While the kill switch is on, every page says so (polled: it can be turned on elsewhere). */
function KillSwitchBanner() {
  const { data } = useLoad(() => api<Workspace>('GET', '/v1/workspace'), [], 2000);
  if (!data?.kill_switch_active) return null;
  return (
    <div class="banner banner-danger" role="status">
      <strong>Kill switch is ON:</strong> every run start and step of this workspace is denied.{' '}
      <Link href="/settings#kill-switch">Turn it off in Settings</Link>
    </div>
  );
}

function Shell({ me, onSignOut, onOwnerSet }: { me: Me; onSignOut: () => void; onOwnerSet: () => void }) {
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <div class="brand">
          <img src="/assets/favicon.svg" alt="" width={24} height={24} /> runguard
        </div>
        <Nav />
        <div class="who">
          {/* Cut short when the header is full: the whole of it on hover. */}
          <span class="muted" title={`${me.email ?? 'owner not set'} · ${me.workspace.name} (${me.workspace.plan})`}>
            {me.email ?? 'owner not set'} · {me.workspace.name} ({me.workspace.plan})
          </span>
          <button type="button" onClick={onSignOut}>
            Sign out
          </button>
        </div>
      </header>
      <KillSwitchBanner />
      {me.email === null && <OwnerForm onDone={onOwnerSet} />}
      <main id="main" tabIndex={-1}>
        <Switch>
          <Route path="/">
            <OverviewPage />
          </Route>
          <Route path="/runs">
            <RunsPage />
          </Route>
          <Route path="/runs/:id">{(params) => <RunDetailPage id={params.id} />}</Route>
          <Route path="/users">
            <UsersPage />
          </Route>
          <Route path="/budgets">
            <BudgetsPage />
          </Route>
          <Route path="/tools">
            <ToolsPage />
          </Route>
          <Route path="/settings">
            <SettingsPage me={me} />
          </Route>
          <Route path="/pricing">
            <PricingPage />
          </Route>
          <Route path="/alerts">
            <AlertsPage />
          </Route>
          <Route path="/api-keys">
            <ApiKeysPage />
          </Route>
          <Route>
            <h1>Not found</h1>
            <p>
              No such page. <Link href="/">Go to the overview</Link>.
            </p>
          </Route>
        </Switch>
      </main>
    </>
  );
}

function App() {
  const [location, navigate] = useLocation();
  const [me, setMe] = useState<Me | null>(null);
  const [session, setSession] = useState(0);

  useEffect(() => {
    whenSignedOut(() => {
      setMe(null);
      navigate('/sign-in');
    });
    // The header names the workspace and its plan: both can change on the Settings page.
    let soon: ReturnType<typeof setTimeout> | undefined;
    const refresh = () => {
      clearTimeout(soon);
      soon = setTimeout(() => {
        if (getToken()) api<Me>('GET', '/v1/auth/me').then(setMe, () => {});
      }, 100);
    };
    window.addEventListener(CHANGED, refresh);
    return () => window.removeEventListener(CHANGED, refresh);
  }, []);
  useEffect(() => {
    if (!getToken()) {
      setMe(null);
      if (location !== '/sign-in') navigate('/sign-in');
      return;
    }
    api<Me>('GET', '/v1/auth/me').then(setMe, () => setMe(null));
  }, [session]);

  const signedIn = () => {
    setSession((s) => s + 1);
    navigate('/');
  };
  const signOut = async () => {
    // The server ends the token too (every session of this account), not just this tab's copy.
    await api('POST', '/v1/auth/sign-out').catch(() => {});
    clearToken();
    setMe(null);
    navigate('/sign-in');
  };

  if (location === '/sign-in' || !getToken()) return <SignIn onSignedIn={signedIn} />;
  if (!me)
    return (
      <main id="main" class="loading">
        <p>Loading…</p>
      </main>
    );
  return <Shell me={me} onSignOut={signOut} onOwnerSet={() => setSession((s) => s + 1)} />;
}

render(<App />, document.getElementById('app')!);
