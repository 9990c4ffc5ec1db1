// Reads of the audit trail an auditor makes (docs/adr/0021-audit-filters-and-export.md), on the
// machine's Postgres with 200,000 rows (one every 10 s; 4 kinds, 3 statuses; 50 busy actors with 2 %
// of the rows each, and a rare one with 0.1 %):
// - a filtered page of 500 deep in the trail: a busy actor (the cursor 2,000 of its rows in) and
//   the rare one (the cursor 100 of its rows in), median of 20 reads each, with the actor index of
//   migration 0005 and without it;
// - the CSV export of every row through the real route (keyset batches of 1,000), rows per second.
// Knob (environment): BENCH_AUDIT_ROWS (200000).
import { sql } from 'kysely';
import { performance } from 'node:perf_hooks';
import type { Bench, Figure } from './run.ts';
import { startTestApp } from '../test/helpers/api/app.ts';
import { listActionsPage } from '../src/state/actions.ts';

const ROWS = Number(process.env.BENCH_AUDIT_ROWS ?? 200_000);

const bench: Bench = async (log) => {
  const t = await startTestApp();
  const db = t.db.database.db;
  try {
    await sql`insert into deployment_actions (kind, status, actor, detail, created_at)
      select (array['restart','stop','pull','deploy'])[g % 4 + 1], (array['started','completed','failed'])[g % 3 + 1], case when g % 1000 = 0 then 'rare' else 'user' || (g % 50) end, 'row ' || g,
             timestamptz '2026-01-01' - g * interval '10 seconds' from generate_series(1, ${ROWS}) g`.execute(db);
    // Vacuumed as an aged table would be: the first reads after a bulk insert would pay for hint bits.
    await sql`vacuum analyze deployment_actions`.execute(db);
    log(`${ROWS} audit rows`);
    const cursorOf = async (actor: string, n: number) =>
      (await sql<{ id: string }>`select id from deployment_actions where actor = ${actor} order by created_at desc, id desc offset ${n} limit 1`.execute(db)).rows[0]!.id;
    const busy = await cursorOf('user7', 2000);
    const rare = await cursorOf('rare', 100);
    const page = async (actor: string, before: string) => {
      const runs: number[] = [];
      for (let i = 0; i < 20; i++) {
        const s = performance.now();
        await listActionsPage(db, { actor }, { before, limit: 501 });
        runs.push(performance.now() - s);
      }
      return runs.sort((a, b) => a - b)[10]!;
    };
    const figures: Figure[] = [];
    for (const [what, actor, before] of [['busy', 'user7', busy], ['rare', 'rare', rare]] as const) {
      const ms = await page(actor, before);
      figures.push({ name: `audit page of 500 filtered by a ${what} actor, deep cursor, median`, value: ms, unit: 'ms', goal: '≤ 50 ms', ok: ms <= 50 });
    }

    const token = await t.token('viewer');
    const s = performance.now();
    const res = await t.app.inject({ method: 'GET', url: '/api/deployment/actions.csv', headers: { authorization: `Bearer ${token}` } });
    const seconds = (performance.now() - s) / 1000;
    const lines = res.body.split('\r\n').length - 2;
    if (res.statusCode !== 200 || lines !== ROWS) throw new Error(`export: ${res.statusCode}, ${lines} rows`);
    log(`export: ${lines} rows, ${(res.rawPayload.length / 1e6).toFixed(1)} MB in ${seconds.toFixed(2)} s`);
    figures.push({ name: 'audit CSV export', value: Math.round(lines / seconds), unit: 'rows/s', goal: '≥ 10000 rows/s', ok: lines / seconds >= 10_000 });

    await sql`drop index deployment_actions_actor`.execute(db);
    figures.push({ name: 'the busy actor\'s page without the actor index, median', value: await page('user7', busy), unit: 'ms' });
    figures.push({ name: 'the rare actor\'s page without the actor index, median', value: await page('rare', rare), unit: 'ms' });
    return figures;
  } finally {
    await t.close();
  }
};
export default bench;
