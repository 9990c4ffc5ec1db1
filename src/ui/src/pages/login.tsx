import { useState } from 'preact/hooks';
import { api, ApiError, session, type Me } from '../api.ts';

interface LoginAnswer {
  token: string;
  expiresAt: string;
  user: { username: string; role: string };
}

export function LoginPage(props: { reason: string | null; onSignedIn: (me: Me) => void }) {
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const r = await api<LoginAnswer>('/api/auth/login', { method: 'POST', json: { username, password } });
      session.set(r.token);
      props.onSignedIn(await api<Me>('/api/auth/me'));
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) setError('Wrong user name or password.');
      else if (err instanceof ApiError && err.status === 429) setError(`Too many attempts: ${err.message}`);
      else setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="login-wrap">
      <form class="card login" onSubmit={(e) => void submit(e)} aria-labelledby="login-title">
        <div class="login-brand">
          <span class="brand-mark" aria-hidden="true">▣</span> Installer
        </div>
        <h1 id="login-title">Sign in</h1>
        {props.reason && !error && <div class="notice warn" data-testid="signed-out">Your session has ended ({props.reason}). Sign in again.</div>}
        <label>
          User name
          <input name="username" autocomplete="username" value={username} onInput={(e) => setUsername(e.currentTarget.value)} required autofocus />
        </label>
        <label>
          Password
          <input name="password" type="password" autocomplete="current-password" value={password} onInput={(e) => setPassword(e.currentTarget.value)} required />
        </label>
        {error && (
          <div class="notice bad" role="alert" data-testid="login-error">
            {error}
          </div>
        )}
        <button type="submit" class="btn primary wide" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
        <p class="muted small">Operators manage the platform here; accounts are added with <code>npm run user -- add</code>.</p>
      </form>
    </div>
  );
}
