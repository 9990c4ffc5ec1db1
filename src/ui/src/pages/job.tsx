// One job: its status, a cancel button, and its live output over SSE (fetch streaming with the
// token; reconnects with Last-Event-ID and drops anything at or below the last seq shown).
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, ApiError, hasRole, type Job } from '../api.ts';
import { useApp } from '../app-context.ts';
import { bytes, time } from '../format.ts';
import { Link } from '../router.tsx';
import { SseFollower, type FollowState } from '../sse.ts';
import { Badge, ConditionList, Dialog, ErrorBox, Notice } from '../components/common.tsx';
import { whilePageVisible } from '../visibility.ts';

/** Output entries kept on the page; older ones are dropped (the stream and the database keep them all). */
const MAX_ENTRIES = 20_000;

interface Entry {
  seq: number;
  type: 'phase' | 'output' | 'warning' | 'finished';
  text: string;
  stream?: 'stdout' | 'stderr';
  tone?: 'ok' | 'bad';
}

interface Progress {
  id: string;
  status: string;
  current?: number;
  total?: number;
  seq: number;
}

interface EventData {
  seq: number;
  type: string;
  at: string;
  [k: string]: unknown;
}

const DONE = /^(Download complete|Pull complete|Already exists|Pulled|Skipped)/;

function phaseText(d: EventData): string {
  const phase = String(d.phase ?? '');
  if (phase === 'started') {
    const services = Array.isArray(d.services) && d.services.length ? ` ${(d.services as string[]).join(', ')}` : '';
    return `started ${String(d.kind ?? '')}${services}`;
  }
  if (typeof d.command === 'string') return `${phase}: ${d.command}`;
  const rest = Object.entries(d)
    .filter(([k]) => !['seq', 'type', 'at', 'phase'].includes(k))
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' ');
  return rest ? `${phase} (${rest})` : phase;
}

export function JobPage(props: { jobId: string }) {
  const { me } = useApp();
  const [job, setJob] = useState<Job | null>(null);
  const [jobError, setJobError] = useState<unknown>(null);
  const [streamState, setStreamState] = useState<{ s: FollowState; detail?: string }>({ s: 'connecting' });
  const [, setVersion] = useState(0);
  const entries = useRef<Entry[]>([]);
  const dropped = useRef(0);
  const progress = useRef(new Map<string, Progress>());
  const lastSeq = useRef(0);
  const [finished, setFinished] = useState<EventData | null>(null);
  const [confirmCancel, setConfirmCancel] = useState(false);
  const [cancelBusy, setCancelBusy] = useState(false);
  const [cancelError, setCancelError] = useState<unknown>(null);
  const [cancelNote, setCancelNote] = useState<string | null>(null);
  const [follow, setFollow] = useState(true);
  const pane = useRef<HTMLDivElement>(null);

  /**
   * Loads the status row; false once the job has ended and its status answers its request's last
   * generation (a cancel that raced the end is still looked at by the controller).
   */
  const loadJob = async (): Promise<boolean> => {
    try {
      const j = await api<Job>(`/api/deployment/jobs/${props.jobId}`);
      setJob(j);
      setJobError(null);
      const behind = j.observedGeneration !== null && j.observedGeneration < j.generation;
      return (j.phase !== 'completed' && j.phase !== 'failed') || behind;
    } catch (err) {
      setJobError(err);
      return true;
    }
  };

  // The job's status row every 2 s while the tab is visible, until it has ended.
  useEffect(() => whilePageVisible(loadJob, 2000), [props.jobId]);

  // The event stream.
  useEffect(() => {
    entries.current = [];
    dropped.current = 0;
    progress.current = new Map();
    lastSeq.current = 0;
    setFinished(null);
    const push = (e: Entry) => {
      entries.current.push(e);
      if (entries.current.length > MAX_ENTRIES) {
        entries.current.splice(0, entries.current.length - MAX_ENTRIES);
        dropped.current++;
      }
    };
    const follower = new SseFollower({
      url: `/api/deployment/jobs/${encodeURIComponent(props.jobId)}/logs`,
      reconnect: true,
      isLast: (e) => e.event === 'finished',
      onState: (s, detail) => setStreamState({ s, ...(detail ? { detail } : {}) }),
      onEvent: (e) => {
        let d: EventData;
        try {
          d = JSON.parse(e.data) as EventData;
        } catch {
          return;
        }
        const seq = Number(d.seq ?? e.id);
        // Replayed after a reconnect: already shown.
        if (!Number.isFinite(seq) || seq <= lastSeq.current) return;
        lastSeq.current = seq;
        switch (e.event) {
          case 'phase':
            push({ seq, type: 'phase', text: phaseText(d) });
            break;
          case 'output':
            push({ seq, type: 'output', text: String(d.line ?? ''), stream: d.stream === 'stderr' ? 'stderr' : 'stdout' });
            break;
          case 'progress': {
            const id = String(d.id ?? '?');
            progress.current.set(id, {
              id,
              status: String(d.status ?? ''),
              ...(typeof d.current === 'number' ? { current: d.current } : {}),
              ...(typeof d.total === 'number' ? { total: d.total } : {}),
              seq,
            });
            break;
          }
          case 'warning':
            push({ seq, type: 'warning', text: String(d.message ?? '') });
            break;
          case 'finished':
            push({
              seq,
              type: 'finished',
              tone: d.outcome === 'completed' ? 'ok' : 'bad',
              text: `finished: ${String(d.outcome)} (state ${String(d.state)}, exit code ${d.exitCode ?? '—'})${d.detail ? `: ${String(d.detail)}` : ''}`,
            });
            setFinished(d);
            void loadJob();
            break;
          default:
            push({ seq, type: 'output', text: `${e.event}: ${e.data}` });
        }
        setVersion((v) => v + 1);
      },
    }).start();
    return () => follower.stop();
  }, [props.jobId]);

  // Keep the newest line in view while following.
  useEffect(() => {
    const el = pane.current;
    if (el && follow) el.scrollTop = el.scrollHeight;
  });

  const cancel = async () => {
    setCancelBusy(true);
    setCancelError(null);
    try {
      const r = await api<{ jobId: string }>(`/api/deployment/jobs/${props.jobId}/cancel`, { method: 'POST' });
      setConfirmCancel(false);
      setCancelNote(`Cancel requested (cancel-job ${r.jobId}).`);
      void loadJob();
    } catch (err) {
      setCancelError(err);
    } finally {
      setCancelBusy(false);
    }
  };

  const ended = job ? job.phase === 'completed' || job.phase === 'failed' : false;
  const bars = [...progress.current.values()];
  const stateText: Record<FollowState, string> = {
    connecting: 'connecting…',
    live: 'live',
    reconnecting: 'reconnecting…',
    ended: 'finished',
    failed: 'stream failed',
  };

  return (
    <div class="page">
      <div class="page-head">
        <h1>
          Job {job ? <span>{job.kind}</span> : null} <code class="small">{props.jobId}</code>
        </h1>
        <Link href="/">← Status</Link>
      </div>
      {jobError instanceof ApiError && jobError.status === 404 ? <Notice tone="bad">No job {props.jobId}.</Notice> : <ErrorBox error={jobError} />}
      {job && (
        <section class="card">
          <dl class="facts wide" data-testid="job-facts">
            <dt>Phase</dt>
            <dd>
              <Badge value={job.phase} /> {job.state && <span class="muted">chart state {job.state}</span>}
            </dd>
            <dt>Services</dt>
            <dd>{job.services.join(', ') || 'all'}</dd>
            <dt>Requested by</dt>
            <dd>
              {job.actor}, {time(job.createdAt)}
            </dd>
            <dt>Started / ended</dt>
            <dd>
              {time(job.startedAt)} / {time(job.finishedAt)}
            </dd>
            <dt>Exit code</dt>
            <dd data-testid="job-exit">{job.exitCode ?? '—'}</dd>
            {job.detail && (
              <>
                <dt>Detail</dt>
                <dd>{job.detail}</dd>
              </>
            )}
            {job.targetJobId && (
              <>
                <dt>Cancels</dt>
                <dd>
                  <Link href={`/jobs/${job.targetJobId}`}>{job.targetJobId}</Link>
                </dd>
              </>
            )}
            {job.cancelRequestedBy && (
              <>
                <dt>Cancel</dt>
                <dd data-testid="job-cancel">
                  requested by {job.cancelRequestedBy},{' '}
                  {job.observedGeneration !== null && job.observedGeneration >= job.generation ? 'seen by the controller' : 'not yet seen by the controller'}
                </dd>
              </>
            )}
            <dt>Conditions</dt>
            <dd>
              <ConditionList conditions={job.conditions} testid="job-conditions" />
            </dd>
          </dl>
          {hasRole(me, 'operator') && !ended && !job.cancelRequestedBy && job.kind !== 'cancel-job' && job.kind !== 'self-update' && (
            <button type="button" class="btn danger" data-testid="cancel-job" onClick={() => (setCancelError(null), setConfirmCancel(true))}>
              Cancel job
            </button>
          )}
          {cancelNote && <Notice>{cancelNote}</Notice>}
        </section>
      )}

      {job?.kind === 'self-update' && !ended && (
        <Notice testid="self-update-transcript-note">
          The installer is updating itself. Its helper's output and the outcome follow here once the installer that comes up has read them.
        </Notice>
      )}

      {bars.length > 0 && (
        <section class="card" aria-labelledby="progress-title">
          <h2 id="progress-title">Pull progress</h2>
          <div class="progress-list" data-testid="pull-progress">
            {bars.map((p) => {
              const done = DONE.test(p.status);
              const pct = p.total ? Math.min(100, Math.round(((p.current ?? 0) / p.total) * 100)) : done ? 100 : null;
              return (
                <div class="progress-row" key={p.id} data-layer={p.id}>
                  <code class="progress-id">{p.id}</code>
                  <progress max={100} value={pct ?? undefined} aria-label={`${p.id} ${p.status}`} />
                  <span class="progress-text">
                    {p.status}
                    {p.total ? ` ${bytes(p.current)} / ${bytes(p.total)}` : ''}
                  </span>
                </div>
              );
            })}
          </div>
        </section>
      )}

      <section class="card" aria-labelledby="output-title">
        <div class="card-head">
          <h2 id="output-title">Output</h2>
          <span class={`stream-state s-${streamState.s}`} data-testid="stream-state" title={streamState.detail}>
            {stateText[streamState.s]}
            {streamState.detail ? `: ${streamState.detail}` : ''}
          </span>
          <label class="check small">
            <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.currentTarget.checked)} /> follow
          </label>
        </div>
        <div class="output" ref={pane} data-testid="job-output" role="log" aria-live="polite" aria-labelledby="output-title" tabIndex={0}>
          {dropped.current > 0 && <div class="line muted">… older lines dropped from this page</div>}
          {entries.current.map((e) => (
            <div key={e.seq} class={`line t-${e.type} ${e.stream === 'stderr' ? 'stderr' : ''} ${e.tone ? `tone-${e.tone}` : ''}`} data-seq={e.seq}>
              {e.type === 'phase' ? '▸ ' : e.type === 'warning' ? '⚠ ' : ''}
              {e.text}
            </div>
          ))}
          {entries.current.length === 0 && <div class="line muted">No output yet.</div>}
        </div>
        {finished && (
          <Notice tone={finished.outcome === 'completed' ? 'ok' : 'bad'} testid="job-finished">
            Job {String(finished.outcome)}
            {finished.detail ? `: ${String(finished.detail)}` : ''}
          </Notice>
        )}
      </section>

      {confirmCancel && (
        <Dialog
          title="Cancel this job?"
          confirmLabel="Cancel job"
          cancelLabel="Keep running"
          danger
          busy={cancelBusy}
          error={cancelError}
          onConfirm={() => void cancel()}
          onCancel={() => setConfirmCancel(false)}
          testid="confirm-cancel"
        >
          <p>The running compose step is stopped (SIGTERM, then SIGKILL after 5 s). The job ends failed; what it already changed stays changed.</p>
        </Dialog>
      )}
    </div>
  );
}
