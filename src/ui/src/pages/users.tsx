// Users (admin): list, add, change the role of, disable or enable, reset the password of, and
// remove. Someone whose password an admin chose picks their own at their next sign-in; every
// change signs the user out at once. The last admin cannot be removed, disabled or demoted.
import { useState } from 'preact/hooks';
import { api, type Me, type Role } from '../api.ts';
import { time } from '../format.ts';
import { Badge, Dialog, ErrorBox, Notice, TableScroll, usePoll } from '../components/common.tsx';
import { PASSWORD_MIN } from './password.tsx';

export interface UserRow {
  username: string;
  role: Role;
  disabled: boolean;
  mustChangePassword: boolean;
  createdAt: string;
  updatedAt: string;
}

const ROLES: Role[] = ['viewer', 'operator', 'admin'];
const USERNAME = /^[a-z_][a-z0-9_.-]{0,63}$/;

type Pending =
  | { kind: 'reset'; user: UserRow }
  | { kind: 'remove'; user: UserRow };

export function UsersPage(props: { me: Me }) {
  const users = usePoll((signal) => api<UserRow[]>('/api/users', { signal }), 0);
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const [pending, setPending] = useState<Pending | null>(null);
  const [dialogError, setDialogError] = useState<unknown>(null);
  const [resetTo, setResetTo] = useState('');
  // Add form
  const [name, setName] = useState('');
  const [role, setRole] = useState<Role>('viewer');
  const [password, setPassword] = useState('');
  const [adding, setAdding] = useState(false);
  const [addError, setAddError] = useState<unknown>(null);

  const act = async (key: string, what: () => Promise<string>) => {
    setBusy(key);
    setError(null);
    setNotice(null);
    try {
      setNotice(await what());
      users.reload();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(null);
    }
  };

  const patch = (u: UserRow, body: { role?: Role; disabled?: boolean }) =>
    act(`${u.username}:patch`, async () => {
      await api<UserRow>(`/api/users/${encodeURIComponent(u.username)}`, { method: 'PATCH', json: body });
      if (body.role) return `${u.username} is now ${body.role}; their sessions were signed out.`;
      return body.disabled ? `${u.username} is disabled and signed out.` : `${u.username} is enabled.`;
    });

  const add = async (e: Event) => {
    e.preventDefault();
    setAdding(true);
    setAddError(null);
    setNotice(null);
    try {
      const u = await api<UserRow>('/api/users', { method: 'POST', json: { username: name, role, password } });
      setNotice(`Added ${u.username} (${u.role}). Give them the password; they choose their own at first sign-in.`);
      setName('');
      setPassword('');
      users.reload();
    } catch (err) {
      setAddError(err);
    } finally {
      setAdding(false);
    }
  };

  const confirm = async () => {
    if (!pending) return;
    setDialogError(null);
    setBusy('dialog');
    try {
      const u = pending.user;
      if (pending.kind === 'reset') {
        await api<UserRow>(`/api/users/${encodeURIComponent(u.username)}/password`, { method: 'PUT', json: { password: resetTo } });
        setNotice(`New password set for ${u.username}; they choose their own at next sign-in.`);
      } else {
        await api(`/api/users/${encodeURIComponent(u.username)}`, { method: 'DELETE' });
        setNotice(`Removed ${u.username}.`);
      }
      setPending(null);
      users.reload();
    } catch (err) {
      setDialogError(err);
    } finally {
      setBusy(null);
    }
  };

  const nameProblem = name !== '' && !USERNAME.test(name);
  const passwordProblem = password !== '' && password.length < PASSWORD_MIN;

  return (
    <div class="page">
      <div class="page-head">
        <h1>Users</h1>
      </div>
      <p class="lead">
        Viewers read everything; operators also run platform actions; admins also manage users, host migration and the log window. Changing a
        user's role, password or status signs them out at once. The last admin cannot be removed, disabled or demoted.
      </p>
      <ErrorBox error={users.error} />
      <ErrorBox error={error} />
      {notice && (
        <Notice tone="ok" testid="users-notice">
          {notice}
        </Notice>
      )}
      <section class="card">
        {!users.data ? (
          <p class="muted">Loading…</p>
        ) : (
          <TableScroll label="Users">
            <table class="table" data-testid="users">
              <thead>
                <tr>
                  <th>User</th>
                  <th>Role</th>
                  <th>Status</th>
                  <th>Added</th>
                  <th>Actions</th>
                </tr>
              </thead>
              <tbody>
                {users.data.map((u) => (
                  <tr key={u.username} data-user={u.username}>
                    <td>
                      {u.username}
                      {u.username === props.me.username && <span class="muted small"> (you)</span>}
                    </td>
                    <td>
                      <select
                        aria-label={`Role of ${u.username}`}
                        value={u.role}
                        disabled={busy !== null}
                        onChange={(e) => void patch(u, { role: e.currentTarget.value as Role })}
                      >
                        {ROLES.map((r) => (
                          <option key={r} value={r}>
                            {r}
                          </option>
                        ))}
                      </select>
                    </td>
                    <td>
                      <Badge value={u.disabled ? 'disabled' : 'enabled'} />
                      {u.mustChangePassword && <span class="small muted"> must choose a password</span>}
                    </td>
                    <td>{time(u.createdAt)}</td>
                    <td class="row-actions">
                      <button type="button" class="btn" disabled={busy !== null} onClick={() => void patch(u, { disabled: !u.disabled })}>
                        {u.disabled ? 'Enable' : 'Disable'}
                      </button>{' '}
                      <button type="button" class="btn" disabled={busy !== null} onClick={() => (setResetTo(''), setDialogError(null), setPending({ kind: 'reset', user: u }))}>
                        Reset password…
                      </button>{' '}
                      <button type="button" class="btn danger" disabled={busy !== null} onClick={() => (setDialogError(null), setPending({ kind: 'remove', user: u }))}>
                        Remove…
                      </button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableScroll>
        )}
      </section>

      <section class="card" aria-labelledby="add-title">
        <h2 id="add-title">Add a user</h2>
        <form class="toolbar" onSubmit={(e) => void add(e)} data-testid="add-user">
          <label>
            User name
            <input name="username" value={name} autocomplete="off" spellcheck={false} onInput={(e) => setName(e.currentTarget.value)} aria-invalid={nameProblem} required />
          </label>
          <label>
            Role
            <select name="role" value={role} onChange={(e) => setRole(e.currentTarget.value as Role)}>
              {ROLES.map((r) => (
                <option key={r} value={r}>
                  {r}
                </option>
              ))}
            </select>
          </label>
          <label>
            First password
            <input name="password" type="password" autocomplete="new-password" value={password} onInput={(e) => setPassword(e.currentTarget.value)} aria-invalid={passwordProblem} required />
          </label>
          <button type="submit" class="btn primary" disabled={adding || !name || !password}>
            {adding ? 'Adding…' : 'Add user'}
          </button>
        </form>
        {nameProblem && <p class="small warn-text">Up to 64 lower-case letters, digits, _ . and -, starting with a letter or _.</p>}
        {passwordProblem && <p class="small warn-text">At least {PASSWORD_MIN} characters.</p>}
        <ErrorBox error={addError} />
      </section>

      {pending?.kind === 'reset' && (
        <Dialog
          title={`Reset the password of ${pending.user.username}?`}
          confirmLabel="Set password"
          busy={busy === 'dialog'}
          confirmDisabled={resetTo.length < PASSWORD_MIN}
          error={dialogError}
          onConfirm={() => void confirm()}
          onCancel={() => setPending(null)}
          testid="reset-password"
        >
          <p>They are signed out at once and choose their own password at their next sign-in.</p>
          <label>
            New password (at least {PASSWORD_MIN} characters)
            <input name="resetPassword" type="password" autocomplete="new-password" value={resetTo} onInput={(e) => setResetTo(e.currentTarget.value)} />
          </label>
        </Dialog>
      )}
      {pending?.kind === 'remove' && (
        <Dialog
          title={`Remove ${pending.user.username}?`}
          confirmLabel="Remove"
          danger
          busy={busy === 'dialog'}
          error={dialogError}
          onConfirm={() => void confirm()}
          onCancel={() => setPending(null)}
          testid="remove-user"
        >
          <p>They are signed out at once and can no longer sign in. Audit rows keep their name.</p>
        </Dialog>
      )}
    </div>
  );
}
