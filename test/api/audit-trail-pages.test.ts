// Reused pages of the audit trail (docs/adr/0014-audit-trail-reads.md), on the machine's Postgres:
// what is reused, for how long, and what is never served stale. A write is heard through its
// NOTIFY, whichever process sent it; a write without one (an older build's) shows within the age.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { AUDIT_CHANNEL, AuditTrailPages, recordFinished, recordStarted, type ActionRow } from '../../src/state/actions.ts';
import type { DB } from '../../src/db/schema.ts';

let t: TestDatabase;
/** A second connection pool that counts the selects the pages make. */
let counted: Kysely<DB>;
let selects = 0;
/** Another session, as another installer process would write. */
let other: pg.Client;

beforeAll(async () => {
  t = await createTestDatabase();
  const pool = new pg.Pool({ connectionString: t.url, max: 3 });
  // pg-pool's end() resolves before its clients' sockets have closed, so the drop's forced
  // termination can reach a client still closing; the pool reports that as an 'error' event, which
  // would be an uncaught exception without a listener (the app's own pool has one too).
  pool.on('error', () => {});
  counted = new Kysely<DB>({
    dialect: new PostgresDialect({ pool }),
    log: (e) => {
      if (e.level === 'query' && /from "deployment_actions"/.test(e.query.sql)) selects++;
    },
  });
  other = new pg.Client({ connectionString: t.url });
  await other.connect();
});

afterAll(async () => {
  for (const p of opened) await p.close();
  await other?.end();
  await counted?.destroy();
  await t?.drop();
});

const actor = { id: 'alice', email: 'alice@example.com' };
const render = (rows: ActionRow[]) => JSON.stringify(rows.map((r) => [String(r.id), r.status, r.detail]));
const details = async (p: AuditTrailPages, limit = 10) => (JSON.parse((await p.json(limit)).toString()) as [string, string, string][]).map((r) => `${r[2]}:${r[1]}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const insertElsewhere = (detail: string) =>
  other.query(`insert into deployment_actions (kind, status, actor, detail) values ('stop', 'completed', 'bob', $1)`, [detail]);
const listen = (channel: string, onNotify: (payload: string) => void) => t.database.listen(channel, onNotify);
const opened: AuditTrailPages[] = [];
/** Pages whose LISTEN is open, as after the route's first read. */
async function pagesOf(db: Kysely<DB>, renderRows: (rows: ActionRow[]) => string, maxAgeMs: number): Promise<AuditTrailPages> {
  const pages = new AuditTrailPages(db, renderRows, listen, maxAgeMs);
  await pages.start();
  opened.push(pages);
  return pages;
}
/** Until `pages` has heard `n` more writes than `from`. */
const heard = (pages: AuditTrailPages, from: number, n = 1) => expect.poll(() => pages.writesHeard - from, { timeout: 5_000, interval: 5 }).toBe(n);

describe('audit trail pages', () => {
  it('shares one read among callers within the age, per limit', async () => {
    const pages = await pagesOf(counted, render, 10_000);
    const from = pages.writesHeard;
    await recordStarted(t.database.db, { kind: 'stop', actor, detail: 'a' });
    await heard(pages, from);
    const before = selects;
    const answers = await Promise.all(Array.from({ length: 20 }, () => pages.json(10)));
    expect(answers.every((a) => a === answers[0])).toBe(true); // the very same bytes
    expect(await pages.json(10)).toBe(answers[0]);
    expect(selects - before).toBe(1);
    await pages.json(3); // another limit is another page
    expect(selects - before).toBe(2);
  });

  it('shows a write, started and finished, as soon as its notification is heard, long before the age', async () => {
    const pages = await pagesOf(counted, render, 10_000);
    expect(await details(pages)).not.toContain('b:started');
    let from = pages.writesHeard;
    const row = await recordStarted(t.database.db, { kind: 'restart', actor, detail: 'b' });
    await heard(pages, from);
    expect((await details(pages))[0]).toBe('b:started');
    from = pages.writesHeard;
    await recordFinished(t.database.db, String(row.id), { status: 'completed', exitCode: 0 });
    await heard(pages, from);
    expect((await details(pages))[0]).toBe('b:completed');
  });

  it("hears another process's write: one in a transaction at its commit, none when it rolls back", async () => {
    const pages = await pagesOf(counted, render, 10_000);
    expect(await details(pages)).not.toContain('d:completed');
    const from = pages.writesHeard;
    await other.query('begin');
    await insertElsewhere('rolled back');
    await other.query(`select pg_notify('${AUDIT_CHANNEL}', '')`);
    await other.query('rollback');
    await other.query('begin');
    await insertElsewhere('d');
    await other.query(`select pg_notify('${AUDIT_CHANNEL}', '')`);
    await sleep(100);
    expect(pages.writesHeard).toBe(from); // nothing before the commit
    expect(await details(pages)).not.toContain('d:completed');
    await other.query('commit');
    await heard(pages, from);
    expect((await details(pages))[0]).toBe('d:completed');
    expect(await details(pages)).not.toContain('rolled back:completed');
  });

  it('shows a write that sends no notification (an older build\'s) once the age has passed', async () => {
    const pages = await pagesOf(counted, render, 300);
    expect(await details(pages)).not.toContain('c:completed');
    await insertElsewhere('c');
    expect(await details(pages)).not.toContain('c:completed'); // still the page read before it
    await sleep(350);
    expect((await details(pages))[0]).toBe('c:completed');
  });

  it('reuses nothing until its LISTEN is open', async () => {
    const pages = new AuditTrailPages(counted, render, listen, 10_000);
    opened.push(pages);
    const before = selects;
    await pages.json(10); // opens the LISTEN; this read is not kept for reuse until it is open
    await pages.start();
    await pages.json(10);
    await pages.json(10);
    expect(selects - before).toBe(2);
  });

  it('does not serve a read that was in flight when a write was heard', async () => {
    const pages = await pagesOf(counted, render, 10_000);
    // Hold the next read behind a lock another session takes.
    await other.query('begin');
    await other.query('lock table deployment_actions in access exclusive mode');
    const before = selects;
    const held = pages.json(10);
    const sharing = pages.json(10); // before any write: shares the held read
    await sleep(100);
    // A write heard while the read waits (its notification, sent by a third session).
    const from = pages.writesHeard;
    await sql`select pg_notify(${AUDIT_CHANNEL}, '')`.execute(t.database.db);
    await heard(pages, from);
    const after = pages.json(10); // must not share the read that started before the write
    await other.query('commit');
    await Promise.all([held, sharing, after]);
    expect(selects - before).toBe(2);
    await pages.json(10); // the read started after the write is the page now
    expect(selects - before).toBe(2);
  });

  it('keeps no failed read: each caller gets the error, and the next call reads again', async () => {
    const failing = await pagesOf(counted, () => {
      throw new Error('render failed');
    }, 10_000);
    await expect(failing.json(10)).rejects.toThrow('render failed');
    const before = selects;
    await expect(failing.json(10)).rejects.toThrow('render failed');
    expect(selects - before).toBe(1);
  });

  it('offers a page without a promise only when json() would give the same bytes', async () => {
    const pages = await pagesOf(counted, render, 300);
    expect(pages.ready(10)).toBeUndefined(); // nothing read yet
    const inFlight = pages.json(10);
    expect(pages.ready(10)).toBeUndefined(); // still reading
    const first = await inFlight;
    expect(pages.ready(10)).toBe(first);
    expect(pages.ready(3)).toBeUndefined(); // another limit
    const from = pages.writesHeard;
    await recordStarted(t.database.db, { kind: 'pull', actor, detail: 'r' });
    await heard(pages, from);
    expect(pages.ready(10)).toBeUndefined(); // a write heard
    const second = await pages.json(10);
    expect(pages.ready(10)).toBe(second);
    await sleep(320);
    expect(pages.ready(10)).toBeUndefined(); // past its age

    const failing = await pagesOf(counted, () => {
      throw new Error('render failed');
    }, 10_000);
    await expect(failing.json(10)).rejects.toThrow('render failed');
    expect(failing.ready(10)).toBeUndefined();

    const uncached = new AuditTrailPages(counted, render, listen, 0);
    await uncached.json(10);
    expect(uncached.ready(10)).toBeUndefined();
  });

  it('reads every time when the age is 0', async () => {
    const pages = new AuditTrailPages(counted, render, listen, 0);
    const before = selects;
    await pages.json(10);
    await pages.json(10);
    expect(selects - before).toBe(2);
    await insertElsewhere('e');
    expect((await details(pages))[0]).toBe('e:completed');
  });

  it('still reads the database in order of creation, newest first', async () => {
    const pages = new AuditTrailPages(t.database.db, render, listen, 0);
    const rows = await sql<{ detail: string }>`select detail from deployment_actions order by created_at desc, id desc limit 10`.execute(t.database.db);
    expect((JSON.parse((await pages.json(10)).toString()) as [string, string, string][]).map((r) => r[2])).toEqual(rows.rows.map((r) => r.detail));
  });
});
