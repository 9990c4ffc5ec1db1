// Platform status: containers with state and health, the actions (operator and up), jobs, and the
// installer's own version and last self-update, the history of self-updates, and the update policy.
import { useState } from 'preact/hooks';
import { api, hasRole, type Job, type PlatformStatus, type VersionInfo } from '../api.ts';
import { useApp } from '../app-context.ts';
import { ago, shortDigest, time } from '../format.ts';
import { Link, navigate } from '../router.tsx';
import { Badge, Dialog, ErrorBox, Notice, TableScroll, usePoll } from '../components/common.tsx';
import { JOB_KINDS } from '../../../contracts/job-kinds.ts';
import { UpdatePolicyCard } from '../components/update-policy.tsx';
import { UpdateHistoryCard } from '../components/update-history.tsx';
import { SwarmCards } from '../components/swarm-state.tsx';

/** What the buttons say of each kind POST /api/deployment/jobs starts; the rest is in the one table of job kinds. */
export const ACTIONS = [
  { action: 'deploy', label: 'Deploy', what: 'fetch the templates, pull, then compose up the whole platform', destructive: true },
  { action: 'restart', label: 'Restart', what: 'restart the containers in place', destructive: true },
  { action: 'stop', label: 'Stop', what: 'docker compose stop', destructive: true },
  { action: 'kill', label: 'Kill', what: 'docker compose kill: no graceful shutdown', destructive: true },
  { action: 'pull', label: 'Pull', what: 'pull the images (nothing restarts)', destructive: false },
  { action: 'compose-up', label: 'Compose up', what: 'start the images already pulled', destructive: false },
  { action: 'apply-config', label: 'Apply config', what: 'write pending .env changes and recreate the services', destructive: true },
] as const;

type ActionDef = (typeof ACTIONS)[number];

export function StatusPage() {
  const { me } = useApp();
  const status = usePoll((signal) => api<PlatformStatus>('/api/deployment/status', { signal }), 5000);
  const jobs = usePoll((signal) => api<Job[]>('/api/deployment/jobs?limit=15', { signal }), 5000);
  const s = status.data;
  const swarm = s?.runtime === 'swarm';
  // On a Swarm the stack's services, also those scaled to zero (no task, so no container, is left of them).
  const services = s ? [...new Set(swarm && s.swarm ? s.swarm.services.map((x) => x.service) : s.containers.map((c) => c.service).filter(Boolean))].sort() : [];

  return (
    <div class="page">
      <div class="page-head">
        <h1>Platform status</h1>
        {s && (
          <span class="muted" data-testid="platform-runtime">
            {swarm ? 'Swarm stack' : 'compose project'} <code>{s.project}</code>
          </span>
        )}
      </div>
      <ErrorBox error={status.error} />
      {s?.engineError && !(swarm && s.swarmError) && <Notice tone="bad">{s.engineError}</Notice>}
      {swarm && <SwarmCards swarm={s.swarm} error={s.swarmError} />}

      {/* On a Swarm the Tasks card is the containers' view, with their nodes; the manager knows no container's health. */}
      {!swarm && (
        <section class="card" aria-labelledby="containers-title">
          <h2 id="containers-title">Containers</h2>
          {!s ? (
            <p class="muted">Loading…</p>
          ) : s.containers.length === 0 ? (
            <p class="muted">No containers of the platform exist. An operator can deploy it.</p>
          ) : (
            <TableScroll label="Containers">
              <table class="table" data-testid="containers">
                <thead>
                  <tr>
                    <th>Container</th>
                    <th>Service</th>
                    <th>State</th>
                    <th>Health</th>
                    <th>Image</th>
                    <th>Since</th>
                  </tr>
                </thead>
                <tbody>
                  {s.containers.map((c) => (
                    <tr key={c.name} data-container={c.name}>
                      <td>
                        <code>{c.name}</code>
                      </td>
                      <td>{c.service}</td>
                      <td>
                        <Badge value={c.state} />
                      </td>
                      <td>{c.health ? <Badge value={c.health} /> : <span class="muted">no check</span>}</td>
                      <td class="ellipsis" title={`${c.image}${c.digest ? `\n${c.digest}` : ''}`}>
                        {c.image}
                      </td>
                      <td title={time(c.since)}>{ago(c.since)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </TableScroll>
          )}
        </section>
      )}

      {hasRole(me, 'operator') ? (
        <ActionsCard services={services} busy={!!s && s.running.length + s.queued.length > 0} />
      ) : (
        <p class="muted small" data-testid="read-only">
          You have the {me.role} role: you can watch, and an operator can act.
        </p>
      )}

      <section class="card" aria-labelledby="jobs-title">
        <h2 id="jobs-title">Jobs</h2>
        {s && (s.running.length > 0 || s.queued.length > 0) && (
          <p>
            {s.running.length} running, {s.queued.length} queued.
          </p>
        )}
        <JobsTable jobs={jobs.data ?? []} />
      </section>

      <InstallerCard />

      <UpdateHistoryCard />

      <UpdatePolicyCard />
    </div>
  );
}

function ActionsCard(props: { services: string[]; busy: boolean }) {
  const [selected, setSelected] = useState<string[]>([]);
  const [confirm, setConfirm] = useState<ActionDef | null>(null);
  const [sending, setSending] = useState(false);
  const [error, setError] = useState<unknown>(null);

  const run = async (a: ActionDef) => {
    setSending(true);
    setError(null);
    try {
      const body = JOB_KINDS[a.action].takesServices && selected.length ? { action: a.action, services: selected } : { action: a.action };
      const r = await api<{ jobId: string }>('/api/deployment/jobs', { method: 'POST', json: body });
      setConfirm(null);
      navigate(`/jobs/${r.jobId}`);
    } catch (err) {
      setError(err);
    } finally {
      setSending(false);
    }
  };
  const target = (a: ActionDef) => (JOB_KINDS[a.action].takesServices && selected.length ? `the service${selected.length > 1 ? 's' : ''} ${selected.join(', ')}` : 'the whole platform');

  return (
    <section class="card" aria-labelledby="actions-title" data-testid="actions">
      <h2 id="actions-title">Actions</h2>
      <fieldset class="services">
        <legend>Services (none ticked: all)</legend>
        {props.services.map((name) => (
          <label key={name} class="check">
            <input
              type="checkbox"
              name="service"
              value={name}
              checked={selected.includes(name)}
              onChange={(e) => setSelected((cur) => (e.currentTarget.checked ? [...cur, name] : cur.filter((x) => x !== name)))}
            />
            {name}
          </label>
        ))}
      </fieldset>
      <div class="actions">
        {ACTIONS.map((a) => (
          <button
            key={a.action}
            type="button"
            class={`btn ${a.destructive ? 'warn' : ''}`}
            data-action={a.action}
            title={a.what}
            disabled={sending}
            onClick={() => (a.destructive ? (setError(null), setConfirm(a)) : void run(a))}
          >
            {a.label}
          </button>
        ))}
      </div>
      {props.busy && <p class="muted small">A job is running: new ones wait in the queue and run one at a time.</p>}
      {!confirm && <ErrorBox error={error} />}
      {confirm && (
        <Dialog
          title={`${confirm.label} ${target(confirm)}?`}
          confirmLabel={confirm.label}
          danger
          busy={sending}
          error={error}
          onConfirm={() => void run(confirm)}
          onCancel={() => setConfirm(null)}
          testid="confirm-action"
        >
          <p>
            This will {confirm.what} for {target(confirm)}. Users of the platform may notice. The job's output follows live.
          </p>
        </Dialog>
      )}
    </section>
  );
}

export function JobsTable(props: { jobs: Job[] }) {
  if (!props.jobs.length) return <p class="muted">No jobs yet.</p>;
  return (
    <TableScroll label="Jobs">
      <table class="table" data-testid="jobs">
        <thead>
          <tr>
            <th>Created</th>
            <th>Kind</th>
            <th>Services</th>
            <th>Actor</th>
            <th>Phase</th>
            <th>Exit</th>
            <th>Detail</th>
          </tr>
        </thead>
        <tbody>
          {props.jobs.map((j) => (
            <tr key={j.jobId}>
              <td>
                <Link href={`/jobs/${j.jobId}`}>{time(j.createdAt)}</Link>
              </td>
              <td>{j.kind}</td>
              <td>{j.services.join(', ') || <span class="muted">all</span>}</td>
              <td>{j.actor}</td>
              <td>
                <Badge value={j.phase} />
              </td>
              <td>{j.exitCode ?? ''}</td>
              <td class="ellipsis" title={j.detail ?? ''}>
                {j.detail ?? ''}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </TableScroll>
  );
}

function InstallerCard() {
  const { check, checkError } = useApp();
  const version = usePoll((signal) => api<VersionInfo>('/api/version', { signal }), 0);
  const v = version.data;
  const last = check?.lastUpdate;
  return (
    <section class="card" aria-labelledby="installer-title" data-testid="installer">
      <h2 id="installer-title">Installer</h2>
      <dl class="facts">
        <dt>Image</dt>
        <dd>{v ? (v.image ?? <span class="muted">{v.note ?? 'not in a container'}</span>) : '…'}</dd>
        <dt>Digest</dt>
        <dd>
          <code title={v?.digest ?? ''}>{shortDigest(v?.digest)}</code>
        </dd>
        <dt>Update</dt>
        <dd data-testid="update-check">
          {check
            ? check.updateAvailable
              ? `a newer build is available: ${shortDigest(check.remoteDigest)}`
              : check.error
                ? `unknown: ${check.error}`
                : 'this is the newest build of its channel'
            : checkError
              ? `the check failed: ${checkError}`
              : 'checking…'}
        </dd>
        {v && !v.inContainer && (
          <>
            <dt>Self-update</dt>
            <dd data-testid="self-update-unavailable" class="small">
              not possible here: this installer runs as a process, not as the packaged stack it would replace. To try one on this
              machine: <code class="wrap">bash scripts/try-self-update.sh</code>
            </dd>
          </>
        )}
        <dt>Last update</dt>
        <dd data-testid="last-update">
          {last?.status ? (
            <>
              <Badge value={last.status} /> {time(last.at)}
              {last.jobId && (
                <span data-testid="last-update-transcript">
                  {' '}
                  <Link href={`/jobs/${last.jobId}`} title="the update's preflight, its helper's output and its outcome">
                    transcript
                  </Link>
                </span>
              )}
              {last.detail && <div class="small">{last.detail}</div>}
            </>
          ) : (
            <span class="muted">never updated</span>
          )}
        </dd>
      </dl>
    </section>
  );
}
