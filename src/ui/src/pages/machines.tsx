// Machine state: every state chart the controllers run, drawn, with the current state of a chosen
// actor (a job, a self-update) highlighted.
import { useState } from 'preact/hooks';
import { api, type Chart, type ChartInstance } from '../api.ts';
import { time } from '../format.ts';
import { Link } from '../router.tsx';
import { ChartDrawing, outgoing } from '../components/chart.tsx';
import { Badge, ErrorBox, usePoll } from '../components/common.tsx';

const ACTIVE_PHASES = ['queued', 'running', 'requested', 'preflight', 'helper-running'];

export function MachinesPage() {
  const charts = usePoll((signal) => api<{ charts: Chart[] }>('/api/machines', { signal }), 5000);
  return (
    <div class="page">
      <div class="page-head">
        <h1>Machine state</h1>
        <span class="muted">each chart as the controllers run it; the highlighted state is where the chosen actor is now, or where it ended</span>
      </div>
      <ErrorBox error={charts.error} />
      {!charts.data && !charts.error && <p class="muted">Loading…</p>}
      {charts.data?.charts.map((c) => <ChartCard key={c.id} chart={c} />)}
    </div>
  );
}

function ChartCard(props: { chart: Chart }) {
  const c = props.chart;
  const [chosen, setChosen] = useState<string | null>(null);
  const fallback = c.instances.find((i) => ACTIVE_PHASES.includes(i.phase)) ?? c.instances[0] ?? null;
  const inst: ChartInstance | null = c.instances.find((i) => i.id === chosen) ?? fallback;
  const active = inst?.stateIds ?? [];
  const next = outgoing(c, active);
  const isJob = c.id === 'job' || c.id === 'hostMigration';
  return (
    <section class="card chart-card" aria-labelledby={`chart-${c.id}-title`} data-testid={`chart-${c.id}`}>
      <div class="card-head">
        <h2 id={`chart-${c.id}-title`}>
          {c.title} <span class="muted small">chart v{c.version}</span>
        </h2>
        {c.instances.length > 0 && (
          <label class="inline">
            Actor
            <select value={inst?.id ?? ''} onChange={(e) => setChosen(e.currentTarget.value)} data-testid={`instances-${c.id}`}>
              {c.instances.map((i) => (
                <option key={i.id} value={i.id}>
                  {`${time(i.at)} · ${i.label} · ${i.state ?? i.phase}`}
                </option>
              ))}
            </select>
          </label>
        )}
      </div>
      <p class="muted small">{c.description}</p>
      <div class="chart-layout">
        <div class="chart-scroll" role="region" aria-label={`${c.title} chart`} tabIndex={0}>
          <ChartDrawing chart={c} active={active} />
        </div>
        <aside class="chart-side">
          {inst ? (
            <>
              <dl class="facts">
                <dt>Actor</dt>
                <dd>{isJob ? <Link href={`/jobs/${inst.id}`}>{inst.label}</Link> : inst.label}</dd>
                <dt>Phase</dt>
                <dd>
                  <Badge value={inst.phase} />
                </dd>
                <dt>State</dt>
                <dd data-testid={`current-${c.id}`}>
                  <code>{inst.state ?? 'not started'}</code>
                </dd>
                <dt>At</dt>
                <dd>{time(inst.at)}</dd>
              </dl>
              {inst.note && <p class="muted small">{inst.note}</p>}
              {next.length > 0 && (
                <>
                  <h3>Can go next</h3>
                  <ul class="transitions">
                    {next.map((e) => (
                      <li key={e.id}>
                        <code>{e.label}</code> → {e.target.slice(c.rootId.length + 1)}
                      </li>
                    ))}
                  </ul>
                </>
              )}
              {next.length === 0 && inst.state && <p class="muted small">A final state: this actor is done.</p>}
            </>
          ) : (
            <p class="muted">Nothing has run this chart yet.</p>
          )}
        </aside>
      </div>
    </section>
  );
}
