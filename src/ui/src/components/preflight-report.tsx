// The preflight report in the update dialog (docs/adr/0054-preflight-report.md): what the update
// would do, each check pass, warn or block with its sentence, the compose file's diff and the
// migrations, read when the dialog opens. A report that blocks keeps the update from being started.
import { useEffect, useState } from 'preact/hooks';
import { request, type PreflightReport } from '../api.ts';
import { ErrorBox } from './common.tsx';

const MARK = { pass: '✓', warn: '!', block: '✕' } as const;
const NAME: Record<string, string> = {
  target: 'Build', signature: 'Signature', compose: 'Compose file', migrations: 'Migrations', engine: 'Docker engine', disk: 'Backup space', quarantine: 'Quarantine', policy: 'Update policy',
};

/** Reads the report once; `onReport` hears it (or null while it is read or when it failed). */
export function PreflightReportView(props: { onReport: (r: PreflightReport | null) => void }) {
  const [report, setReport] = useState<PreflightReport | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    const ctl = new AbortController();
    request('/api/system/self-update/preflight', { signal: ctl.signal })
      .then((res) => res.json() as Promise<PreflightReport>)
      .then(
        (r) => (setReport(r), props.onReport(r)),
        (err: unknown) => !ctl.signal.aborted && setError(err),
      );
    return () => ctl.abort();
  }, []);
  if (error) return <ErrorBox error={error} />;
  if (!report) return <p class="muted" data-testid="preflight-report" aria-busy="true">Reading what the update would do…</p>;
  return (
    <section class="preflight" data-testid="preflight-report" aria-label="What the update would do">
      <ul class="preflight-checks">
        {report.checks.map((c) => (
          <li key={c.id} class={`check check-${c.level}`} data-testid={`preflight-${c.id}`} data-level={c.level}>
            <span class="check-mark" aria-hidden="true">
              {MARK[c.level]}
            </span>
            <span>
              <span class="sr-only">{c.level}: </span>
              <strong>{NAME[c.id] ?? c.id}:</strong> {c.sentence}
            </span>
          </li>
        ))}
      </ul>
      {report.migrations && report.migrations.length > 0 && (
        <details data-testid="preflight-migration-list">
          <summary>
            {report.migrations.length} schema migration{report.migrations.length > 1 ? 's' : ''}
          </summary>
          <ul>
            {report.migrations.map((m) => (
              <li key={m.name}>
                <code>{m.name}</code> ({m.step})
              </li>
            ))}
          </ul>
        </details>
      )}
      {report.composeDiff && (
        <details data-testid="preflight-compose-diff">
          <summary>Compose file changes</summary>
          <pre class="diff">{report.composeDiff}</pre>
        </details>
      )}
      {report.blocked && (
        <p class="notice bad" data-testid="preflight-blocked">
          <strong>The update cannot start:</strong> a check above blocks it.
        </p>
      )}
    </section>
  );
}
