// The audit trail, newest first: filters by actor, kind, status and time, older pages through the
// API's cursor (`Link: rel="next"`), and the same selection as a CSV file; for admins, the
// diagnostics bundle to hand to support.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, download, hasRole, request, type Action } from '../api.ts';
import { useApp } from '../app-context.ts';
import { ACTOR_KIND_LABEL, time } from '../format.ts';
import { Link } from '../router.tsx';
import { Badge, ErrorBox, Notice, TableScroll, usePoll } from '../components/common.tsx';
import { ACTION_KINDS, ACTION_STATUSES, ACTOR_KINDS } from '../../../contracts/audit.ts';

const KINDS = ACTION_KINDS;
const STATUSES = ACTION_STATUSES;

interface Filters {
  actor: string;
  actorKind: string;
  kind: string;
  status: string;
  /** datetime-local values, read as UTC (as on the logs page). */
  from: string;
  to: string;
}
const NO_FILTERS: Filters = { actor: '', actorKind: '', kind: '', status: '', from: '', to: '' };

/** A datetime-local value as UTC; `end`: the last microsecond of the second it names, so "to" includes it. */
function utcIso(local: string, end = false): string | undefined {
  if (!local) return undefined;
  return `${local.length === 16 ? `${local}:00` : local}${end ? '.999999' : ''}Z`;
}

function filterQuery(f: Filters): URLSearchParams {
  const q = new URLSearchParams();
  if (f.actor.trim()) q.set('actor', f.actor.trim());
  if (f.actorKind) q.set('actorKind', f.actorKind);
  if (f.kind) q.set('kind', f.kind);
  if (f.status) q.set('status', f.status);
  const since = utcIso(f.from);
  const until = utcIso(f.to, true);
  if (since) q.set('since', since);
  if (until) q.set('until', until);
  return q;
}

/** A page of rows and the URL of the next older page (the `Link: rel="next"` header), if any. */
async function readPage(url: string, signal?: AbortSignal): Promise<{ url: string; rows: Action[]; next: string | null }> {
  const res = await request(url, signal ? { signal } : {});
  const next = /<([^>]+)>;\s*rel="next"/.exec(res.headers.get('link') ?? '')?.[1] ?? null;
  return { url, rows: (await res.json()) as Action[], next };
}

/**
 * `newer` followed by the rows of `older` it does not hold: both in the API's order (newest first),
 * and every row of `older` missing from `newer` is older than all of it, so the result is in order too.
 */
function merge(newer: Action[], older: Action[]): Action[] {
  const ids = new Set(newer.map((r) => r.id));
  return [...newer, ...older.filter((r) => !ids.has(r.id))];
}

export function AuditPage() {
  const [limit, setLimit] = useState(50);
  const [draft, setDraft] = useState<Filters>(NO_FILTERS);
  const [filters, setFilters] = useState<Filters>(NO_FILTERS);
  const query = filterQuery(filters);
  const firstUrl = `/api/deployment/actions?${new URLSearchParams({ limit: String(limit), ...Object.fromEntries(query) }).toString()}`;
  const polled = usePoll((signal) => readPage(firstUrl, signal), 10_000, [firstUrl]);
  // The page of other filters, while the new one loads, is not shown.
  const first = { ...polled, data: polled.data?.url === firstUrl ? polled.data : null };
  // Once older pages are loaded, every row seen stays listed (the first page keeps refreshing the
  // newest rows and their status), and "Load older" follows the cursor of the last older page.
  const [older, setOlder] = useState<{ rows: Action[]; next: string | null } | null>(null);
  const current = useRef(firstUrl);
  current.current = firstUrl;
  const [loadingOlder, setLoadingOlder] = useState(false);
  const [olderError, setOlderError] = useState<unknown>(null);
  useEffect(() => setOlder(null), [firstUrl]);
  useEffect(() => {
    if (older && first.data) setOlder({ rows: merge(first.data.rows, older.rows), next: older.next });
  }, [polled.data]);
  const rows = older ? older.rows : (first.data?.rows ?? null);
  const next = older ? older.next : (first.data?.next ?? null);
  const loadOlder = async () => {
    if (!next) return;
    setLoadingOlder(true);
    setOlderError(null);
    try {
      const asked = firstUrl;
      const page = await readPage(next);
      // Filters changed meanwhile: the page belongs to the old ones.
      if (current.current !== asked) return;
      setOlder({ rows: merge(rows ?? [], page.rows), next: page.next });
    } catch (err) {
      setOlderError(err instanceof ApiError ? err : new Error(String(err)));
    } finally {
      setLoadingOlder(false);
    }
  };

  const [csv, setCsv] = useState<{ busy: boolean; done: string | null; error: unknown }>({ busy: false, done: null, error: null });
  const exportCsv = async () => {
    setCsv({ busy: true, done: null, error: null });
    try {
      const got = await download(`/api/deployment/actions.csv?${query.toString()}`, 'audit-trail.csv');
      setCsv({ busy: false, done: `${got.name} (${got.bytes} bytes)`, error: null });
    } catch (err) {
      setCsv({ busy: false, done: null, error: err instanceof ApiError ? err : new Error(String(err)) });
    }
  };

  const { me } = useApp();
  const [diag, setDiag] = useState<{ busy: boolean; done: string | null; error: unknown }>({ busy: false, done: null, error: null });
  const downloadDiagnostics = async () => {
    setDiag({ busy: true, done: null, error: null });
    try {
      const got = await download('/api/system/diagnostics', 'installer-diagnostics.json');
      setDiag({ busy: false, done: `${got.name} (${got.bytes} bytes)`, error: null });
    } catch (err) {
      setDiag({ busy: false, done: null, error: err instanceof ApiError ? err : new Error(String(err)) });
    }
  };
  const set = (k: keyof Filters) => (e: { currentTarget: { value: string } }) => setDraft({ ...draft, [k]: e.currentTarget.value });
  const filtering = query.toString() !== '';
  return (
    <div class="page">
      <div class="page-head">
        <h1>Audit trail</h1>
        <label class="inline">
          Show
          <select aria-label="Rows per page" value={String(limit)} onChange={(e) => setLimit(Number(e.currentTarget.value))}>
            {[50, 200, 500].map((n) => (
              <option key={n} value={String(n)}>
                {n}
              </option>
            ))}
          </select>
          per page
        </label>
        <button type="button" class="btn" onClick={first.reload}>
          Refresh
        </button>
        <button type="button" class="btn" data-testid="export-csv" disabled={csv.busy} title="Every row matching the filters, as a CSV file" onClick={() => void exportCsv()}>
          {csv.busy ? 'Exporting…' : 'Export CSV'}
        </button>
        {hasRole(me, 'admin') && (
          <button
            type="button"
            class="btn"
            data-testid="download-diagnostics"
            disabled={diag.busy}
            title="Versions, settings without secret values, container states, recent jobs and log lines"
            onClick={() => void downloadDiagnostics()}
          >
            {diag.busy ? 'Preparing…' : 'Download diagnostics'}
          </button>
        )}
      </div>
      {diag.done && <p class="muted small" data-testid="diagnostics-done">Downloaded {diag.done}</p>}
      <ErrorBox error={diag.error} />
      <form
        class="toolbar"
        data-testid="audit-filters"
        onSubmit={(e) => {
          e.preventDefault();
          setFilters(draft);
        }}
      >
        <label>
          Actor
          <input name="actor" value={draft.actor} placeholder="any" maxLength={200} onInput={set('actor')} />
        </label>
        <label title="Who vouched for the actor: a local user, a person the control plane forwarded, the control plane itself, or the installer">
          Origin
          <select name="actorKind" value={draft.actorKind} onChange={set('actorKind')}>
            <option value="">any</option>
            {ACTOR_KINDS.map((k) => (
              <option key={k} value={k}>
                {ACTOR_KIND_LABEL[k].label}
              </option>
            ))}
          </select>
        </label>
        <label>
          Kind
          <select name="kind" value={draft.kind} onChange={set('kind')}>
            <option value="">any</option>
            {KINDS.map((k) => (
              <option key={k} value={k}>
                {k}
              </option>
            ))}
          </select>
        </label>
        <label>
          Status
          <select name="status" value={draft.status} onChange={set('status')}>
            <option value="">any</option>
            {STATUSES.map((k) => (
              <option key={k} value={k}>
                {k}
              </option>
            ))}
          </select>
        </label>
        <label>
          From (UTC)
          <input name="from" type="datetime-local" step={1} value={draft.from} onInput={set('from')} />
        </label>
        <label>
          To (UTC)
          <input name="to" type="datetime-local" step={1} value={draft.to} onInput={set('to')} />
        </label>
        <button type="submit" class="btn primary">
          Apply
        </button>
        <button
          type="button"
          class="btn"
          disabled={!filtering && JSON.stringify(draft) === JSON.stringify(NO_FILTERS)}
          onClick={() => {
            setDraft(NO_FILTERS);
            setFilters(NO_FILTERS);
          }}
        >
          Clear
        </button>
      </form>
      {csv.done && <Notice tone="ok" testid="csv-done">Exported {csv.done}.</Notice>}
      <ErrorBox error={csv.error} />
      <ErrorBox error={first.error} />
      <section class="card">
        {!rows ? (
          <p class="muted">Loading…</p>
        ) : rows.length === 0 ? (
          <p class="muted">{filtering ? 'No row matches these filters.' : 'Nothing has been done yet.'}</p>
        ) : (
          <TableScroll label="Audit trail"><table class="table" data-testid="audit">
            <thead>
              <tr>
                <th>Time</th>
                <th>Actor</th>
                <th>Kind</th>
                <th>Status</th>
                <th>Exit code</th>
                <th>Detail</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((a) => (
                <tr key={a.id} data-id={a.id} data-kind={a.kind}>
                  <td title={a.finishedAt ? `finished ${time(a.finishedAt)}` : 'not finished'}>{time(a.createdAt)}</td>
                  <td title={a.actorEmail ?? ''} data-actor-kind={a.actorKind ?? ''}>
                    {a.actor}
                    {/* A row from before kinds were kept shows its actor alone: who vouched is not known. */}
                    {a.actorKind && (
                      <span class="actor-kind" title={ACTOR_KIND_LABEL[a.actorKind].title}>
                        {ACTOR_KIND_LABEL[a.actorKind].label}
                      </span>
                    )}
                  </td>
                  <td>{a.jobId ? <Link href={`/jobs/${a.jobId}`}>{a.kind}</Link> : a.kind}</td>
                  <td>
                    <Badge value={a.status} />
                  </td>
                  <td>{a.exitCode ?? ''}</td>
                  <td class="detail">
                    {a.detail ?? ''}
                    {a.targetDigest && <div class="small muted">target {a.targetDigest}</div>}
                  </td>
                </tr>
              ))}
            </tbody>
          </table></TableScroll>
        )}
        {rows && rows.length > 0 && (
          <div class="toolbar">
            <span class="muted small" data-testid="audit-count">
              {rows.length} row{rows.length === 1 ? '' : 's'} shown{next ? '' : ', the oldest included'}
            </span>
            {next && (
              <button type="button" class="btn" data-testid="load-older" disabled={loadingOlder} onClick={() => void loadOlder()}>
                {loadingOlder ? 'Loading…' : 'Load older'}
              </button>
            )}
          </div>
        )}
        <ErrorBox error={olderError} />
      </section>
    </div>
  );
}
