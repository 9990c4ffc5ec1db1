// The history of self-updates on the Status page, next to the last update: who moved the installer
// from which build to which, how it ended, and the downtime it measured itself
// (docs/adr/0031-update-history.md). Newest first; older pages on demand.
import { useState } from 'preact/hooks';
import { request, type UpdateHistoryEntry } from '../api.ts';
import { useApp } from '../app-context.ts';
import { downtime, shortDigest, time } from '../format.ts';
import { Badge, ConditionList, ErrorBox, TableScroll, usePoll } from './common.tsx';

const PAGE = 10;

interface Page {
  entries: UpdateHistoryEntry[];
  next: string | null;
}

async function loadPage(path: string, signal?: AbortSignal): Promise<Page> {
  const res = await request(path, signal ? { signal } : {});
  const next = /^<([^>]+)>; rel="next"$/.exec(res.headers.get('link') ?? '')?.[1] ?? null;
  return { entries: (await res.json()) as UpdateHistoryEntry[], next };
}

export function UpdateHistoryCard() {
  const { check } = useApp();
  // Read again whenever the last update's outcome changes, so the table agrees with the card above.
  const last = check?.lastUpdate;
  const first = usePoll((signal) => loadPage(`/api/system/self-update/history?limit=${PAGE}`, signal), 30_000, [last?.status, last?.at]);
  const [older, setOlder] = useState<Page[]>([]);
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const firstPage = first.data;
  // Older pages stay as they were read while the newest page is polled; an update in both shows once.
  const pages = firstPage ? [firstPage, ...older.filter((p) => p.entries.length)] : [];
  const entries = dedupe(pages.flatMap((p) => p.entries));
  const next = pages.at(-1)?.next ?? null;

  const more = async () => {
    if (!next) return;
    setLoading(true);
    setError(null);
    try {
      const page = await loadPage(next);
      setOlder((cur) => [...cur, page]);
    } catch (err) {
      setError(err);
    } finally {
      setLoading(false);
    }
  };

  return (
    <section class="card" aria-labelledby="update-history-title" data-testid="update-history">
      <h2 id="update-history-title">Update history</h2>
      <ErrorBox error={first.error ?? error} />
      {!firstPage ? (
        <p class="muted">Loading…</p>
      ) : entries.length === 0 ? (
        <p class="muted">The installer has not updated itself yet.</p>
      ) : (
        <TableScroll label="Update history">
          <table class="table" data-testid="update-history-table">
            <thead>
              <tr>
                <th>Started</th>
                <th>Finished</th>
                <th>Actor</th>
                <th>From</th>
                <th>To</th>
                <th>Outcome</th>
                <th>Downtime</th>
                <th>Conditions</th>
              </tr>
            </thead>
            <tbody>
              {entries.map((e) => (
                <tr key={e.requestId} data-request-id={e.requestId}>
                  <td>{time(e.startedAt)}</td>
                  <td>{time(e.finishedAt)}</td>
                  <td title={e.actor.email ?? ''}>{e.actor.email ?? e.actor.id}</td>
                  <td>
                    <code title={`${e.from.reference ?? ''}\n${e.from.digest ?? ''}`}>{shortDigest(e.from.digest)}</code>
                  </td>
                  <td>
                    <code title={`${e.to.tag ?? ''}\n${e.to.digest ?? ''}`}>{shortDigest(e.to.digest)}</code>
                  </td>
                  <td title={e.detail ?? ''}>
                    <Badge value={e.outcome === 'helper-running' ? 'started' : e.outcome} />
                  </td>
                  <td data-testid="downtime" title={e.downtimeMs !== null ? `${e.downtimeMs} ms: from the old backend's last answer (${time(e.lastAnswerAt)}) to the new one's first readiness (${time(e.firstReadyAt)})` : (e.downtimeNote ?? '')}>
                    {e.downtimeMs !== null ? downtime(e.downtimeMs) : <span class="muted">not measured</span>}
                  </td>
                  <td>
                    <ConditionList conditions={e.conditions} testid="update-conditions" />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
      {next && (
        <button type="button" class="btn" disabled={loading} onClick={() => void more()}>
          Older updates
        </button>
      )}
    </section>
  );
}

function dedupe(entries: UpdateHistoryEntry[]): UpdateHistoryEntry[] {
  const seen = new Set<string>();
  return entries.filter((e) => (seen.has(e.requestId) ? false : (seen.add(e.requestId), true)));
}
