// The shell: sign-in gate, header (navigation, update pill, user), and the pages.
import { useEffect, useState } from 'preact/hooks';
import { AppContext } from './app-context.ts';
import { api, ApiError, hasRole, onUnauthorized, session, signOut as signOutOnServer, type Me, type SelfUpdateCheck, type StartedUpdate } from './api.ts';
import { Link, match, navigate, useLocation, usePageChange } from './router.tsx';
import { UpdateChecker } from './update.ts';
import { ACTOR_KIND_LABEL } from './format.ts';
import { RestartOverlay, UpdatePill } from './components/update.tsx';
import { LoginPage } from './pages/login.tsx';
import { StatusPage } from './pages/status.tsx';
import { JobPage } from './pages/job.tsx';
import { AuditPage } from './pages/audit.tsx';
import { LogsPage } from './pages/logs.tsx';
import { MachinesPage } from './pages/machines.tsx';
import { MigratePage } from './pages/migrate.tsx';
import { PasswordPage } from './pages/password.tsx';
import { UsersPage } from './pages/users.tsx';
import { NotificationsPage } from './pages/notifications.tsx';

export function App() {
  const loc = useLocation();
  const [me, setMe] = useState<Me | null>(null);
  const [checking, setChecking] = useState(!!session.token());
  const [signedOutBecause, setSignedOutBecause] = useState<string | null>(null);
  usePageChange(checking ? null : pageTitle(loc.path, me), loc.path);

  useEffect(() => {
    onUnauthorized((message) => {
      setMe(null);
      setSignedOutBecause(message);
      const here = location.pathname + location.search;
      navigate(here.startsWith('/login') ? here : `/login?next=${encodeURIComponent(here)}`, { replace: true });
    });
    if (!session.token()) {
      if (!location.pathname.startsWith('/login')) navigate(`/login?next=${encodeURIComponent(location.pathname + location.search)}`, { replace: true });
      return;
    }
    api<Me>('/api/auth/me')
      .then((m) => setMe(m))
      .catch(() => {})
      .finally(() => setChecking(false));
  }, []);

  if (checking) return <div class="loading">Loading…</div>;
  if (!me || loc.path === '/login') {
    return (
      <LoginPage
        reason={signedOutBecause}
        onSignedIn={(m) => {
          setMe(m);
          setSignedOutBecause(null);
          const next = loc.query.get('next');
          navigate(next && next.startsWith('/') && !next.startsWith('//') && !next.startsWith('/login') ? next : '/', { replace: true });
        }}
      />
    );
  }
  const signOut = () => void signOutOnServer().then(() => (setMe(null), navigate('/login', { replace: true })));
  if (me.mustChangePassword) return <PasswordPage me={me} forced onChanged={setMe} onSignOut={signOut} />;
  return <SignedIn me={me} onMe={setMe} onSignOut={signOut} />;
}

const TITLES: Record<string, string> = {
  '/': 'Platform status',
  '/audit': 'Audit trail',
  '/logs': 'Container logs',
  '/machines': 'Machine state',
  '/migrate': 'Host migration',
  '/users': 'Users',
  '/notifications': 'Notifications',
};

/** The title of the page shown at `path` (the same choice as the page switch below). */
export function pageTitle(path: string, me: Me | null): string {
  if (!me || path === '/login') return 'Sign in';
  if (me.mustChangePassword) return 'Choose your password';
  const job = match('/jobs/:id', path);
  if (job) return `Job ${job.id!.slice(0, 8)}`;
  if ((path === '/migrate' || path === '/users' || path === '/notifications') && !hasRole(me, 'admin')) return 'Not allowed';
  if (path === '/password' && me.kind === 'user') return 'Change password';
  return TITLES[path] ?? 'Not found';
}

function SignedIn(props: { me: Me; onMe: (me: Me) => void; onSignOut: () => void }) {
  const { me } = props;
  const loc = useLocation();
  const [check, setCheck] = useState<SelfUpdateCheck | null>(null);
  const [checkError, setCheckError] = useState<string | null>(null);
  const [updating, setUpdating] = useState<StartedUpdate | null>(null);

  useEffect(() => {
    const checker = new UpdateChecker<SelfUpdateCheck>({
      check: () => api<SelfUpdateCheck>('/api/system/self-update-check'),
      onResult: (r) => (setCheck(r), setCheckError(null)),
      onError: (err) => setCheckError(err instanceof ApiError ? err.message : String(err)),
      // Until the last update's outcome is recorded (its helper may still run after the reload).
      followWhile: (r) => r.lastUpdate?.status === 'started',
    }).start();
    return () => checker.stop();
  }, []);

  const nav: { href: string; label: string; least?: 'operator' | 'admin' }[] = [
    { href: '/', label: 'Status' },
    { href: '/audit', label: 'Audit trail' },
    { href: '/logs', label: 'Logs' },
    { href: '/machines', label: 'Machine state' },
    { href: '/migrate', label: 'Host migration', least: 'admin' },
    { href: '/users', label: 'Users', least: 'admin' },
    { href: '/notifications', label: 'Notifications', least: 'admin' },
  ];
  const active = (href: string) => (href === '/' ? loc.path === '/' || loc.path.startsWith('/jobs/') : loc.path.startsWith(href));

  let page;
  let params: Record<string, string> | null;
  if (loc.path === '/') page = <StatusPage />;
  else if ((params = match('/jobs/:id', loc.path))) page = <JobPage jobId={params.id!} />;
  else if (loc.path === '/audit') page = <AuditPage />;
  else if (loc.path === '/logs') page = <LogsPage />;
  else if (loc.path === '/machines') page = <MachinesPage />;
  else if (loc.path === '/migrate') page = hasRole(me, 'admin') ? <MigratePage /> : <NotAllowed least="admin" />;
  else if (loc.path === '/users') page = hasRole(me, 'admin') ? <UsersPage me={me} /> : <NotAllowed least="admin" />;
  else if (loc.path === '/notifications') page = hasRole(me, 'admin') ? <NotificationsPage /> : <NotAllowed least="admin" />;
  else if (loc.path === '/password' && me.kind === 'user') page = <PasswordPage me={me} onChanged={props.onMe} />;
  else page = <NotFound />;

  return (
    <AppContext.Provider value={{ me, check, checkError }}>
      <header class="topbar">
        <Link href="/" class="brand">
          <span class="brand-mark" aria-hidden="true">▣</span> Installer
        </Link>
        <nav aria-label="Main">
          {nav
            .filter((n) => !n.least || hasRole(me, n.least))
            .map((n) => (
              <Link key={n.href} href={n.href} class={active(n.href) ? 'active' : ''} aria-current={active(n.href) ? 'page' : undefined}>
                {n.label}
              </Link>
            ))}
        </nav>
        <div class="topbar-right">
          <UpdatePill check={check} onStarted={setUpdating} />
          <span class="user" data-testid="user">
            {me.username} <span class="role">{me.role}</span>
            {me.actorKind && (
              <span class="actor-kind" data-testid="user-kind" title={ACTOR_KIND_LABEL[me.actorKind].title}>
                {ACTOR_KIND_LABEL[me.actorKind].label}
              </span>
            )}
          </span>
          {me.kind === 'user' && (
            <Link href="/password" class={`btn ghost${loc.path === '/password' ? ' active' : ''}`} title="Change your password">
              Password
            </Link>
          )}
          <button type="button" class="btn ghost" onClick={props.onSignOut}>
            Sign out
          </button>
        </div>
      </header>
      <main>{page}</main>
      {updating && <RestartOverlay start={updating} />}
    </AppContext.Provider>
  );
}

function NotFound() {
  return (
    <section class="card">
      <h1>Not found</h1>
      <p>
        There is no page here. <Link href="/">Back to the status</Link>.
      </p>
    </section>
  );
}

function NotAllowed(props: { least: string }) {
  return (
    <section class="card">
      <h1>Not allowed</h1>
      <p>This page needs the {props.least} role.</p>
    </section>
  );
}
