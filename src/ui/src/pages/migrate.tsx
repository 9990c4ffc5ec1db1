// Host migration (admin): the VM user, then the one-off run of migrate-host.sh, followed as a job.
import { useState } from 'preact/hooks';
import { api, type MigrateInfo } from '../api.ts';
import { time } from '../format.ts';
import { Link, navigate } from '../router.tsx';
import { Badge, Dialog, ErrorBox, Notice, usePoll } from '../components/common.tsx';

const VM_USER = /^[a-z_][a-z0-9_-]{0,31}$/;

export function MigratePage() {
  const info = usePoll((signal) => api<MigrateInfo>('/api/migrate', { signal }), 0);
  const [vmUser, setVmUser] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const [saveError, setSaveError] = useState<unknown>(null);
  const [saved, setSaved] = useState<string | null>(null);
  const [confirm, setConfirm] = useState(false);
  const [typed, setTyped] = useState('');
  const [running, setRunning] = useState(false);
  const [runError, setRunError] = useState<unknown>(null);
  const d = info.data;
  const value = vmUser ?? d?.vmUser ?? '';

  const save = async (e: Event) => {
    e.preventDefault();
    setSaving(true);
    setSaveError(null);
    setSaved(null);
    try {
      const r = await api<{ vmUser: string; updatedBy: string }>('/api/migrate/vm-user', { method: 'POST', json: { vmUser: value } });
      setSaved(`VM user set to ${r.vmUser} by ${r.updatedBy}.`);
      setVmUser(null);
      info.reload();
    } catch (err) {
      setSaveError(err);
    } finally {
      setSaving(false);
    }
  };

  const run = async () => {
    setRunning(true);
    setRunError(null);
    try {
      const r = await api<{ jobId: string }>('/api/migrate/run-host', { method: 'POST' });
      navigate(`/jobs/${r.jobId}`);
    } catch (err) {
      setRunError(err);
    } finally {
      setRunning(false);
    }
  };

  return (
    <div class="page">
      <div class="page-head">
        <h1>Host migration</h1>
      </div>
      <p class="lead">
        Retires a legacy systemd-based installation on this host: its units are stopped, disabled and masked, and the new platform stack takes
        over. It is <strong>destructive and one-way</strong>; there is no automatic rollback. Read a dry run first, on the host:{' '}
        <code>bash {d?.scriptPath ?? '/opt/installer/migrate-host.sh'} --dry-run</code>. Run it either here or by hand, never both.
      </p>
      <ErrorBox error={info.error} />
      <section class="card" aria-labelledby="vm-title">
        <h2 id="vm-title">1. VM user</h2>
        <p class="muted small">The SSH/OS user on the VM; deploys put it in place of &lt;USER&gt; in the generated .env values.</p>
        <form class="toolbar" onSubmit={(e) => void save(e)} data-testid="vm-user-form">
          <label>
            VM user
            <input
              name="vmUser"
              value={value}
              placeholder="e.g. ubuntu"
              autocomplete="off"
              spellcheck={false}
              onInput={(e) => setVmUser(e.currentTarget.value)}
              aria-invalid={value !== '' && !VM_USER.test(value)}
            />
          </label>
          <button type="submit" class="btn primary" disabled={saving || !value}>
            {saving ? 'Saving…' : 'Save'}
          </button>
        </form>
        {value !== '' && !VM_USER.test(value) && (
          <p class="small warn-text">A POSIX user name: lower-case letters, digits, _ and -, starting with a letter or _, at most 32 characters.</p>
        )}
        <ErrorBox error={saveError} />
        {saved && (
          <Notice tone="ok" testid="vm-user-saved">
            {saved}
          </Notice>
        )}
      </section>

      <section class="card" aria-labelledby="run-title">
        <h2 id="run-title">2. Run</h2>
        {d && (
          <dl class="facts">
            <dt>VM user</dt>
            <dd data-testid="vm-user-current">{d.vmUser ?? <span class="muted">not set</span>}</dd>
            <dt>PLATFORM_URL</dt>
            <dd>{d.platformUrlSet ? 'set' : <span class="warn-text">not set: the installer's settings need it</span>}</dd>
            <dt>Script on the host</dt>
            <dd>
              <code>{d.scriptPath}</code>
            </dd>
            <dt>Last migration</dt>
            <dd>
              {d.lastJob ? (
                <>
                  <Link href={`/jobs/${d.lastJob.jobId}`}>{time(d.lastJob.createdAt)}</Link> <Badge value={d.lastJob.phase} />{' '}
                  {d.lastJob.detail ?? ''}
                </>
              ) : (
                <span class="muted">never run through the installer</span>
              )}
            </dd>
          </dl>
        )}
        <button type="button" class="btn danger" data-testid="run-migration" disabled={!d?.vmUser || !d.platformUrlSet} onClick={() => (setTyped(''), setRunError(null), setConfirm(true))}>
          Run host migration…
        </button>
        {d && (!d.vmUser || !d.platformUrlSet) && <p class="muted small">Set the VM user and PLATFORM_URL first.</p>}
      </section>

      {confirm && (
        <Dialog
          title="Run the host migration?"
          confirmLabel="Run it"
          danger
          busy={running}
          confirmDisabled={typed !== 'migrate'}
          error={runError}
          onConfirm={() => void run()}
          onCancel={() => setConfirm(false)}
          testid="confirm-migration"
        >
          <p>
            migrate-host.sh runs on the host with full privileges: legacy units are stopped, disabled and masked for good, NFS exports are removed,
            and leftover containers of the old installation are removed. There is no automatic rollback.
          </p>
          <label>
            <span>
              Type <code>migrate</code> to confirm
            </span>
            <input value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autocomplete="off" />
          </label>
        </Dialog>
      )}
    </div>
  );
}
