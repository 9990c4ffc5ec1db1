// The header pill `Manager update available`, its confirmation dialog and the restart overlay.
import { useEffect, useLayoutEffect, useState } from 'preact/hooks';
import { ApiError, request, type PreflightReport, type SelfUpdateCheck, type SelfUpdateStart, type SignatureCheck, type StartedUpdate } from '../api.ts';
import { duration, shortDigest, time } from '../format.ts';
import { INSTANCE_HEADER } from '../../../contracts/instance.ts';
import { healthProbe, RestartWatcher, type WatchState } from '../update.ts';
import { Dialog, useModal } from './common.tsx';
import { PreflightReportView } from './preflight-report.tsx';

export function UpdatePill(props: { check: SelfUpdateCheck | null; onStarted: (r: StartedUpdate) => void }) {
  const [open, setOpen] = useState(false);
  const c = props.check;
  if (c?.lastUpdate?.status === 'started') {
    return (
      <span class="pill pill-progress" data-testid="update-in-progress" title={`Started ${time(c.lastUpdate.at)}; target ${c.lastUpdate.targetDigest ?? 'unknown'}`}>
        Manager update in progress
      </span>
    );
  }
  if (!c?.updateAvailable) return null;
  const tooltip = `Current: ${c.currentDigest ?? 'unknown'}\nRemote: ${c.remoteDigest ?? 'unknown'}${c.warning ? `\n${c.warning}` : ''}`;
  return (
    <>
      <button type="button" class="pill pill-update" data-testid="update-pill" title={tooltip} aria-describedby="update-pill-tip" onClick={() => setOpen(true)}>
        <span class="pill-dot" aria-hidden="true" />
        {c.warning ? 'Manager update rolled back' : 'Manager update available'}
        <span class="pill-tip" id="update-pill-tip" role="tooltip">
          <span>Current: {c.currentDigest ?? 'unknown'}</span>
          <span>Remote: {c.remoteDigest ?? 'unknown'}</span>
          {c.warning && <span data-testid="update-warning">{c.warning}</span>}
        </span>
      </button>
      {open && <UpdateDialog check={c} onClose={() => setOpen(false)} onStarted={(r) => (setOpen(false), props.onStarted(r))} />}
    </>
  );
}

function UpdateDialog(props: { check: SelfUpdateCheck; onClose: () => void; onStarted: (r: StartedUpdate) => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [result, setResult] = useState<SelfUpdateStart | null>(null);
  const [report, setReport] = useState<PreflightReport | null>(null);
  const start = async () => {
    setBusy(true);
    setError(null);
    try {
      const res = await request('/api/system/self-update', { method: 'POST' });
      const r: StartedUpdate = { ...((await res.json()) as SelfUpdateStart), replacing: res.headers.get(INSTANCE_HEADER) };
      if (r.started) props.onStarted(r);
      else setResult(r);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 409 ? new Error(`Not started: ${err.message}`) : err);
    } finally {
      setBusy(false);
    }
  };
  if (result) {
    return (
      <Dialog title="No update started" confirmLabel="Close" cancelLabel="Back" onConfirm={props.onClose} onCancel={props.onClose} testid="update-dialog">
        <p>{result.message}</p>
      </Dialog>
    );
  }
  return (
    <Dialog
      title="Update the installer?"
      confirmLabel="Update now"
      busy={busy}
      confirmDisabled={report?.blocked === true}
      error={error}
      onConfirm={() => void start()}
      onCancel={props.onClose}
      testid="update-dialog"
    >
      <p>
        The installer updates itself to the newest build of its channel: <code>{shortDigest(props.check.currentDigest)}</code> →{' '}
        <code>{shortDigest(props.check.remoteDigest)}</code>.
      </p>
      <ul>
        <li>
          <strong>The installer restarts.</strong> Its backend container is replaced by the new build; if the new build does not become healthy, the
          previous one is started again (one automatic rollback).
        </li>
        <li>
          <strong>The platform stack is not touched:</strong> its containers are not pulled, recreated or restarted.
        </li>
        <li>
          <strong>Expect about one to three minutes without a connection</strong> to this interface. It reloads by itself once the installer is
          back.
        </li>
      </ul>
      {props.check.warning && (
        <p class="notice warn" data-testid="update-dialog-warning">
          <strong>This build did not stick last time:</strong> {props.check.warning}
        </p>
      )}
      {props.check.composeChanged && <p class="muted">The published compose file differs from this install's; the update installs the published one.</p>}
      {/* The report's own signature line takes its place once read. */}
      {props.check.signature && !report?.checks.some((c) => c.id === 'signature') && <SignatureLine signature={props.check.signature} />}
      <PreflightReportView onReport={setReport} />
    </Dialog>
  );
}

/** What the dialog says of the new build's signature (docs/adr/0053-signed-builds.md). */
function SignatureLine({ signature: s }: { signature: SignatureCheck }) {
  const sentence = s.detail.charAt(0).toUpperCase() + s.detail.slice(1);
  if (s.refused) {
    return (
      <p class="notice bad" data-testid="update-dialog-signature">
        <strong>This build is not verified, and the installer refuses it:</strong> {s.detail}.
      </p>
    );
  }
  if (s.policy !== 'off' && s.result !== null && s.result !== 'verified') {
    return (
      <p class="notice warn" data-testid="update-dialog-signature">
        <strong>This build is not verified:</strong> {s.detail}. The update goes on (SIGNATURE_POLICY=warn).
      </p>
    );
  }
  return (
    <p class="muted" data-testid="update-dialog-signature">
      {sentence}.
    </p>
  );
}

export function RestartOverlay(props: { start: StartedUpdate; reload?: () => void }) {
  const [s, setS] = useState<WatchState | null>(null);
  const [now, setNow] = useState(Date.now());
  // A layout effect runs right after the first render (a plain effect waits for a frame): the
  // clock starts at confirmation.
  useLayoutEffect(() => {
    // The reload lands on the update's transcript (its job page), which follows it to its end: the
    // helper's output and the outcome are written by the backend that comes up.
    const jobId = props.start.jobId;
    const reload = props.reload ?? (() => (jobId ? location.assign(`/jobs/${encodeURIComponent(jobId)}`) : location.reload()));
    const watcher = new RestartWatcher({ probe: healthProbe, reload, replacing: props.start.replacing, onChange: setS }).start();
    return () => watcher.stop();
  }, []);
  useEffect(() => {
    const tick = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(tick);
  }, []);
  // A modal the user cannot dismiss: Escape keeps it; the page reloads when the installer is back.
  const dialog = useModal(() => false);
  const elapsed = s ? Math.max(0, now - s.startedAt) : 0;
  const gaveUp = s?.phase === 'gave-up';
  return (
    <dialog ref={dialog} class="overlay" role="alertdialog" aria-labelledby="overlay-title" data-testid="update-overlay" data-phase={s?.phase ?? 'waiting'}>
      <div class="overlay-card">
        {!gaveUp ? (
          <>
            <div class="spinner" aria-hidden="true" />
            <h2 id="overlay-title">Updating the installer…</h2>
            <p>{props.start.message}</p>
            <p>
              Waiting for the installer to restart. This page reloads by itself once it answers again. The platform keeps running meanwhile.
            </p>
            <dl class="facts">
              <dt>Waiting</dt>
              <dd data-testid="overlay-elapsed">{duration(elapsed)}</dd>
              <dt>Health checks</dt>
              <dd data-testid="overlay-polls">
                {s?.polls ?? 0} ({s?.failures ?? 0} without an answer)
              </dd>
              <dt>Last check</dt>
              <dd data-testid="overlay-last">{s?.last ? (s.last.ok ? 'the installer answered' : 'no answer: the installer is restarting') : 'not yet'}</dd>
            </dl>
          </>
        ) : (
          <div data-testid="overlay-gave-up">
            <h2 id="overlay-title">The installer has not come back within 10 minutes</h2>
            <p>
              The update may have failed, or the installer is still restarting. The platform stack was not touched by the update. On the installer's
              host:
            </p>
            <ol>
              <li>
                See why the backend does not answer: <code>docker logs installer-backend</code> (and <code>docker ps -a</code> for its state).
              </li>
              <li>
                See what the update helper did: <code>docker logs installer-self-updater</code>, and its status file{' '}
                <code>&lt;work-dir&gt;/.self-update-status</code>: <code>ok</code>, <code>rolled-back</code> or <code>failed</code>.
              </li>
              <li>
                If it says <code>failed</code>, recover by hand in the installer's directory (the one holding its compose file): <code>docker compose pull &amp;&amp; docker compose up -d</code>.
              </li>
            </ol>
            <div class="modal-actions">
              <button type="button" class="btn primary" onClick={() => location.reload()}>
                Reload now
              </button>
            </div>
          </div>
        )}
      </div>
    </dialog>
  );
}
