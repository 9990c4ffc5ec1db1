// Changing your own password (the current one is required). Also the page a user sees first when
// someone else chose their password: the generated first admin, or a user an admin added or reset.
import { useState } from 'preact/hooks';
import { api, session, type Me } from '../api.ts';
import { ErrorBox, Notice } from '../components/common.tsx';

export const PASSWORD_MIN = 12;

interface TokenAnswer {
  token: string;
  user: { username: string; role: string; mustChangePassword: boolean };
}

export function PasswordPage(props: { me: Me; forced?: boolean; onChanged: (me: Me) => void; onSignOut?: () => void }) {
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const [repeat, setRepeat] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [done, setDone] = useState(false);
  const problem =
    next.length > 0 && next.length < PASSWORD_MIN
      ? `At least ${PASSWORD_MIN} characters.`
      : repeat.length > 0 && repeat !== next
        ? 'The two new passwords differ.'
        : null;

  const submit = async (e: Event) => {
    e.preventDefault();
    if (problem) return;
    setBusy(true);
    setError(null);
    setDone(false);
    try {
      const r = await api<TokenAnswer>('/api/auth/password', { method: 'PUT', json: { currentPassword: current, newPassword: next } });
      // The old token stopped working; the answer carries the new one.
      session.set(r.token);
      setCurrent('');
      setNext('');
      setRepeat('');
      setDone(true);
      props.onChanged(await api<Me>('/api/auth/me'));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  const form = (
    <form class="card login" onSubmit={(e) => void submit(e)} aria-labelledby="password-title" data-testid="password-form">
      <h1 id="password-title">{props.forced ? 'Choose your password' : 'Change password'}</h1>
      {props.forced && (
        <Notice tone="warn" testid="must-change">
          Signed in as {props.me.username}. Someone else chose this password: choose your own before going on.
        </Notice>
      )}
      <label>
        Current password
        <input name="currentPassword" type="password" autocomplete="current-password" value={current} onInput={(e) => setCurrent(e.currentTarget.value)} required />
      </label>
      <label>
        New password
        <input name="newPassword" type="password" autocomplete="new-password" minLength={PASSWORD_MIN} value={next} onInput={(e) => setNext(e.currentTarget.value)} required />
      </label>
      <label>
        New password again
        <input name="repeatPassword" type="password" autocomplete="new-password" value={repeat} onInput={(e) => setRepeat(e.currentTarget.value)} required />
      </label>
      <p class="muted small">At least {PASSWORD_MIN} characters. Your other sessions are signed out.</p>
      {problem && <p class="small warn-text">{problem}</p>}
      <ErrorBox error={error} />
      {done && !props.forced && (
        <Notice tone="ok" testid="password-changed">
          Password changed.
        </Notice>
      )}
      <button type="submit" class="btn primary wide" disabled={busy || !!problem || !current || !next || repeat !== next}>
        {busy ? 'Saving…' : 'Change password'}
      </button>
      {props.onSignOut && (
        <button type="button" class="btn wide" onClick={props.onSignOut}>
          Sign out
        </button>
      )}
    </form>
  );
  return props.forced ? <div class="login-wrap">{form}</div> : <div class="page">{form}</div>;
}
