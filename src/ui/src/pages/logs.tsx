// Platform container logs: live (all services or one), and for admins a time window and a download.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api, ApiError, download, hasRole, type LogLine, type PlatformStatus } from '../api.ts';
import { useApp } from '../app-context.ts';
import { SseFollower, type FollowState } from '../sse.ts';
import { ErrorBox, Notice, usePoll } from '../components/common.tsx';
import { CAPACITY, LogStore } from '../logs/store.ts';
import { LogViewer } from '../logs/viewer.tsx';

/** `2024-05-01T10:00` from a datetime-local input, read as UTC → ISO 8601. */
function utcIso(local: string): string | undefined {
  if (!local) return undefined;
  return `${local.length === 16 ? `${local}:00` : local}Z`;
}

function inputValue(d: Date): string {
  return d.toISOString().slice(0, 19);
}

/**
 * Follows an SSE log stream into a LogStore. Lines are parsed as they come and added to the store
 * once per animation frame, so that a fast stream costs one render a frame, not one a line.
 */
function useLogStream() {
  const store = useMemo(() => new LogStore(), []);
  const [version, setVersion] = useState(0);
  const [state, setState] = useState<{ s: FollowState | 'idle'; detail?: string }>({ s: 'idle' });
  const [summary, setSummary] = useState<string | null>(null);
  const follower = useRef<SseFollower | null>(null);
  const pending = useRef<LogLine[]>([]);
  const frame = useRef(0);

  const flush = () => {
    frame.current = 0;
    const lines = pending.current;
    pending.current = [];
    for (const l of lines) store.push(l);
    setVersion((v) => v + 1);
  };
  const halt = () => {
    follower.current?.stop();
    follower.current = null;
    if (frame.current) cancelAnimationFrame(frame.current);
    frame.current = 0;
  };
  useEffect(() => halt, []);
  const stop = () => {
    halt();
    // Lines already received are kept.
    flush();
    setState({ s: 'idle' });
  };

  const start = (url: string) => {
    halt();
    pending.current = [];
    store.clear();
    setVersion((v) => v + 1);
    setSummary(null);
    let received = 0;
    follower.current = new SseFollower({
      url,
      reconnect: false,
      isLast: (e) => e.event === 'end',
      onState: (s, detail) => setState({ s, ...(detail ? { detail } : {}) }),
      onEvent: (e) => {
        if (e.event === 'end') {
          const n = (JSON.parse(e.data) as { lines?: number }).lines;
          setSummary(`End of the window: ${n ?? received} lines.`);
          return;
        }
        if (e.event === 'error') {
          setState({ s: 'failed', detail: (JSON.parse(e.data) as { message?: string }).message ?? 'the stream failed' });
          return;
        }
        try {
          pending.current.push(JSON.parse(e.data) as LogLine);
          received++;
        } catch {
          return;
        }
        // Animation frames stop in a hidden tab: past twice the capacity the older half could never
        // be shown, so it is counted as dropped at once instead of held.
        if (pending.current.length >= 2 * CAPACITY) {
          pending.current.splice(0, CAPACITY);
          store.skip(CAPACITY);
        }
        frame.current ||= requestAnimationFrame(flush);
      },
    }).start();
  };
  return { store, version, state, summary, start, stop };
}

export function LogsPage() {
  const { me } = useApp();
  const status = usePoll((signal) => api<PlatformStatus>('/api/deployment/status', { signal }), 0);
  const containers = status.data?.containers ?? [];
  const services = [...new Set(containers.map((c) => c.service).filter(Boolean))].sort();
  return (
    <div class="page">
      <div class="page-head">
        <h1>Container logs</h1>
      </div>
      <ErrorBox error={status.error} />
      <LiveLogs services={services} />
      {hasRole(me, 'admin') ? (
        <WindowLogs containers={containers.map((c) => c.name).sort()} />
      ) : (
        <p class="muted small">Time windows and downloads need the admin role.</p>
      )}
    </div>
  );
}

function LiveLogs(props: { services: string[] }) {
  const [service, setService] = useState('');
  const [tail, setTail] = useState('100');
  const live = useLogStream();
  const running = live.state.s === 'live' || live.state.s === 'connecting';
  const url = () => `${service ? `/api/deployment/logs/${encodeURIComponent(service)}` : '/api/deployment/logs'}?tail=${encodeURIComponent(tail || '0')}`;
  return (
    <section class="card" aria-labelledby="live-title" data-testid="live-logs">
      <div class="card-head">
        <h2 id="live-title">Live</h2>
        <span class={`stream-state s-${live.state.s}`} data-testid="live-state">
          {live.state.s === 'idle' ? 'stopped' : live.state.s}
          {live.state.detail ? `: ${live.state.detail}` : ''}
        </span>
      </div>
      <form
        class="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          live.start(url());
        }}
      >
        <label>
          Service
          <select name="service" value={service} onChange={(e) => setService(e.currentTarget.value)}>
            <option value="">all services</option>
            {props.services.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Last lines
          <input name="tail" type="number" min={0} max={10000} value={tail} onInput={(e) => setTail(e.currentTarget.value)} class="narrow" />
        </label>
        <button type="submit" class="btn primary">
          {running ? 'Restart' : 'Follow'}
        </button>
        <button type="button" class="btn" disabled={!running} onClick={live.stop}>
          Stop
        </button>
      </form>
      <LogViewer store={live.store} version={live.version} id="live" />
    </section>
  );
}

function WindowLogs(props: { containers: string[] }) {
  const [since, setSince] = useState(() => inputValue(new Date(Date.now() - 15 * 60_000)));
  const [until, setUntil] = useState('');
  const [container, setContainer] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [downloading, setDownloading] = useState(false);
  const [downloaded, setDownloaded] = useState<string | null>(null);
  const win = useLogStream();

  const query = (forDownload: boolean) => {
    const q = new URLSearchParams();
    const s = utcIso(since);
    const u = utcIso(until);
    if (s) q.set('since', s);
    if (u) q.set('until', u);
    else if (forDownload) q.set('until', new Date().toISOString());
    if (container) q.set('containerName', container);
    return q.toString();
  };

  const downloadWindow = async () => {
    setError(null);
    setDownloaded(null);
    if (!since) return setError(new Error('A download needs a start (since).'));
    setDownloading(true);
    try {
      const got = await download(`/api/deployment-log/download?${query(true)}`, `logs-${new Date().toISOString()}.txt`);
      setDownloaded(`${got.name} (${got.bytes} bytes)`);
    } catch (err) {
      setError(err instanceof ApiError ? err : new Error(String(err)));
    } finally {
      setDownloading(false);
    }
  };

  return (
    <section class="card" aria-labelledby="window-title" data-testid="window-logs">
      <div class="card-head">
        <h2 id="window-title">Time window</h2>
        <span class={`stream-state s-${win.state.s}`} data-testid="window-state">
          {win.state.s === 'idle' ? '' : win.state.s === 'ended' ? 'complete' : win.state.s}
          {win.state.detail ? `: ${win.state.detail}` : ''}
        </span>
      </div>
      <form
        class="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          setError(null);
          win.start(`/api/deployment-log?${query(false)}`);
        }}
      >
        <label>
          From (UTC)
          <input name="since" type="datetime-local" step={1} value={since} onInput={(e) => setSince(e.currentTarget.value)} />
        </label>
        <label>
          To (UTC)
          <input name="until" type="datetime-local" step={1} value={until} onInput={(e) => setUntil(e.currentTarget.value)} />
        </label>
        <label>
          Container
          <select name="containerName" value={container} onChange={(e) => setContainer(e.currentTarget.value)}>
            <option value="">all containers</option>
            {props.containers.map((c) => (
              <option key={c} value={c}>
                {c}
              </option>
            ))}
          </select>
        </label>
        <button type="submit" class="btn primary">
          Show
        </button>
        <button type="button" class="btn" data-testid="download-logs" disabled={downloading} onClick={() => void downloadWindow()}>
          {downloading ? 'Downloading…' : 'Download'}
        </button>
      </form>
      <p class="muted small">Without an end the window keeps following new lines; a download without one ends now.</p>
      <ErrorBox error={error} />
      {downloaded && <Notice tone="ok">Downloaded {downloaded}.</Notice>}
      {win.summary && <Notice>{win.summary}</Notice>}
      <LogViewer store={win.store} version={win.version} id="window" />
    </section>
  );
}
