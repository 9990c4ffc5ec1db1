// The audit trail, newest first; for admins, the diagnostics bundle to hand to support.
import { useState } from 'preact/hooks';
import { api, ApiError, download, hasRole, type Action } from '../api.ts';
import { useApp } from '../app.tsx';
import { time } from '../format.ts';
import { Link } from '../router.tsx';
import { Badge, ErrorBox, TableScroll, usePoll } from '../components/common.tsx';

export function AuditPage() {
  const [limit, setLimit] = useState(50);
  const rows = usePoll((signal) => api<Action[]>(`/api/deployment/actions?limit=${limit}`, { signal }), 10_000, [limit]);
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
  return (
    <div class="page">
      <div class="page-head">
        <h1>Audit trail</h1>
        <label class="inline">
          Show
          <select value={String(limit)} onChange={(e) => setLimit(Number(e.currentTarget.value))}>
            {[50, 200, 500].map((n) => (
              <option key={n} value={String(n)}>
                {n}
              </option>
            ))}
          </select>
          newest
        </label>
        <button type="button" class="btn" onClick={rows.reload}>
          Refresh
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
      <ErrorBox error={rows.error} />
      <section class="card">
        {!rows.data ? (
          <p class="muted">Loading…</p>
        ) : rows.data.length === 0 ? (
          <p class="muted">Nothing has been done yet.</p>
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
              {rows.data.map((a) => (
                <tr key={a.id} data-kind={a.kind}>
                  <td title={a.finishedAt ? `finished ${time(a.finishedAt)}` : 'not finished'}>{time(a.createdAt)}</td>
                  <td title={a.actorEmail ?? ''}>{a.actor}</td>
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
      </section>
    </div>
  );
}
