// The self-update policy on the Status page: what it is and what it last decided, for everyone;
// editable by admins (mode, days, hours in UTC); and the quarantined builds (docs/update-policy.md).
import { useEffect, useState } from 'preact/hooks';
import { api, hasRole, WEEK_DAYS, type QuarantineEntry, type UpdatePolicy, type UpdatePolicyMode, type WeekDay } from '../api.ts';
import { useApp } from '../app-context.ts';
import { shortDigest, time } from '../format.ts';
import { Badge, ErrorBox, TableScroll, usePoll } from './common.tsx';

const MODES: { mode: UpdatePolicyMode; label: string }[] = [
  { mode: 'manual', label: 'Manual: updates are started by hand' },
  { mode: 'notify', label: 'Notify: say when a newer build exists' },
  { mode: 'auto', label: 'Automatic: update inside the maintenance window' },
];
const hh = (h: number) => `${String(h).padStart(2, '0')}:00`;

export function describeWindow(w: UpdatePolicy['window']): string {
  if (!w.days.length) return 'no window';
  const nextDay = w.endHour <= w.startHour ? ' (next day)' : '';
  return `${w.days.join(', ')} ${hh(w.startHour)}–${hh(w.endHour)}${nextDay} UTC`;
}

export function UpdatePolicyCard() {
  const { me } = useApp();
  const policy = usePoll((signal) => api<UpdatePolicy>('/api/system/update-policy', { signal }), 30_000);
  const quarantine = usePoll((signal) => api<QuarantineEntry[]>('/api/system/quarantine', { signal }), 30_000);
  const p = policy.data;
  const admin = hasRole(me, 'admin');
  return (
    <section class="card" aria-labelledby="policy-title" data-testid="update-policy">
      <h2 id="policy-title">Update policy</h2>
      <ErrorBox error={policy.error} />
      {!p ? (
        <p class="muted">Loading…</p>
      ) : (
        <dl class="facts">
          <dt>Mode</dt>
          <dd data-testid="policy-mode">{p.mode}</dd>
          <dt>Window</dt>
          <dd data-testid="policy-window">{describeWindow(p.window)}</dd>
          <dt>Decision</dt>
          <dd data-testid="policy-decision">
            {p.status.decision ? (
              <>
                <Badge value={p.status.decision} /> {p.status.detail && <span class="small">{p.status.detail}</span>}
              </>
            ) : (
              <span class="muted">not evaluated yet</span>
            )}
          </dd>
          {p.status.availableDigest && (
            <>
              <dt>Available</dt>
              <dd>
                <code title={p.status.availableDigest}>{shortDigest(p.status.availableDigest)}</code> since {time(p.status.availableSince)}
              </dd>
            </>
          )}
          <dt>Changed</dt>
          <dd class="small">{p.updatedBy ? `by ${p.updatedBy}, ${time(p.updatedAt)}` : 'never (the default)'}</dd>
        </dl>
      )}
      {p && admin && <PolicyForm policy={p} onSaved={policy.reload} />}
      {p && !admin && <p class="muted small">An admin (or the platform's control plane) changes the policy.</p>}
      <h3>Quarantined builds</h3>
      <ErrorBox error={quarantine.error} />
      {!quarantine.data?.length ? (
        <p class="muted small" data-testid="quarantine-empty">
          None. A build whose update rolls back or fails is listed here and never started automatically again.
        </p>
      ) : (
        <TableScroll label="Quarantined builds">
          <table class="table" data-testid="quarantine">
            <thead>
              <tr>
                <th>Digest</th>
                <th>Outcome</th>
                <th>Since</th>
                <th>Detail</th>
              </tr>
            </thead>
            <tbody>
              {quarantine.data.map((q) => (
                <tr key={q.digest}>
                  <td>
                    <code title={q.digest}>{shortDigest(q.digest)}</code>
                  </td>
                  <td>
                    <Badge value={q.outcome} />
                  </td>
                  <td>{time(q.since)}</td>
                  <td class="ellipsis" title={q.detail ?? ''}>
                    {q.detail ?? ''}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
      {!!quarantine.data?.length && <p class="muted small">Updating by hand to a quarantined build starts it anyway and lifts its quarantine.</p>}
    </section>
  );
}

function PolicyForm(props: { policy: UpdatePolicy; onSaved: () => void }) {
  const [mode, setMode] = useState<UpdatePolicyMode>(props.policy.mode);
  const [days, setDays] = useState<WeekDay[]>(props.policy.window.days);
  const [startHour, setStartHour] = useState(props.policy.window.startHour);
  const [endHour, setEndHour] = useState(props.policy.window.endHour);
  const [saving, setSaving] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [saved, setSaved] = useState(false);
  // A change made elsewhere (another admin, the control plane) replaces the form's values.
  useEffect(() => {
    setMode(props.policy.mode);
    setDays(props.policy.window.days);
    setStartHour(props.policy.window.startHour);
    setEndHour(props.policy.window.endHour);
  }, [props.policy.generation]);

  const save = async (e: Event) => {
    e.preventDefault();
    setSaving(true);
    setError(null);
    setSaved(false);
    try {
      await api<UpdatePolicy>('/api/system/update-policy', { method: 'PUT', json: { mode, window: { days: WEEK_DAYS.filter((d) => days.includes(d)), startHour, endHour } } });
      setSaved(true);
      props.onSaved();
    } catch (err) {
      setError(err);
    } finally {
      setSaving(false);
    }
  };
  const hours = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

  return (
    <form onSubmit={(e) => void save(e)} data-testid="policy-form">
      <fieldset class="services">
        <legend>Mode</legend>
        {MODES.map((m) => (
          <label key={m.mode} class="check">
            <input type="radio" name="mode" value={m.mode} checked={mode === m.mode} onChange={() => setMode(m.mode)} />
            {m.label}
          </label>
        ))}
      </fieldset>
      <fieldset class="services">
        <legend>Maintenance window (UTC)</legend>
        {WEEK_DAYS.map((d) => (
          <label key={d} class="check">
            <input
              type="checkbox"
              name="day"
              value={d}
              checked={days.includes(d)}
              onChange={(e) => setDays((cur) => (e.currentTarget.checked ? [...cur, d] : cur.filter((x) => x !== d)))}
            />
            {d}
          </label>
        ))}
      </fieldset>
      <div class="toolbar">
        <label>
          From
          <select name="startHour" value={startHour} onChange={(e) => setStartHour(Number(e.currentTarget.value))}>
            {hours(0, 23).map((h) => (
              <option key={h} value={h}>
                {hh(h)}
              </option>
            ))}
          </select>
        </label>
        <label>
          Until
          <select name="endHour" value={endHour} onChange={(e) => setEndHour(Number(e.currentTarget.value))}>
            {hours(1, 24).map((h) => (
              <option key={h} value={h}>
                {hh(h)}
              </option>
            ))}
          </select>
        </label>
        <button type="submit" class="btn primary" disabled={saving}>
          {saving ? 'Saving…' : 'Save policy'}
        </button>
      </div>
      {mode === 'auto' && days.length === 0 && <p class="small warn-text">Automatic updates need at least one day.</p>}
      {saved && !error && <p class="small" data-testid="policy-saved">Saved.</p>}
      <ErrorBox error={error} />
    </form>
  );
}
