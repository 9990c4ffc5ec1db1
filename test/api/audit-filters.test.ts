// The audit trail for an auditor (docs/adr/0021-audit-filters-and-export.md), on the machine's
// Postgres: filters by actor, kind, status and time; a cursor past 500 rows that loses and repeats
// nothing while rows are added between pages; the CSV export with its quoting and its guard
// against formula injection; and a 400 naming the parameter for every bad value.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import { sql } from 'kysely';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { recordStarted } from '../../src/state/actions.ts';

let t: TestApp;
let viewer: string;

beforeAll(async () => {
  t = await startTestApp();
  viewer = await t.token('viewer');
});
afterAll(async () => t?.close());

interface Row {
  id: string;
  kind: string;
  status: string;
  exitCode: number | null;
  actor: string;
  actorEmail: string | null;
  detail: string | null;
  createdAt: string;
}

const get = (url: string, token: string | null = viewer) => t.app.inject({ method: 'GET', url, headers: token ? { authorization: `Bearer ${token}` } : {} });

async function list(query: string): Promise<{ rows: Row[]; next: string | null }> {
  const res = await get(`/api/deployment/actions${query ? `?${query}` : ''}`);
  expect(res.statusCode, res.body).toBe(200);
  const link = res.headers.link as string | undefined;
  const next = link ? /^<([^>]+)>; rel="next"$/.exec(link)?.[1] ?? `unparsed: ${link}` : null;
  return { rows: res.json() as Row[], next };
}

/** Inserts rows as another writer would, with the creation times given. */
async function insert(rows: { kind: string; status: string; actor: string; detail?: string | null; createdAt: string; exitCode?: number | null }[]): Promise<void> {
  for (const r of rows) {
    await sql`insert into deployment_actions (kind, status, actor, detail, exit_code, created_at) values (${r.kind}, ${r.status}, ${r.actor}, ${r.detail ?? null}, ${r.exitCode ?? null}, ${r.createdAt}::timestamptz)`.execute(t.db.database.db);
  }
}

/** RFC 4180 records, parsed independently of the writer: quoted fields, doubled quotes, CRLF. */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c !== '"') field += c;
      else if (text[i + 1] === '"') {
        field += '"';
        i++;
      } else quoted = false;
      continue;
    }
    if (c === '"' && field === '') {
      quoted = true;
    } else if (c === ',') {
      record.push(field);
      field = '';
    } else if (c === '\r' && text[i + 1] === '\n') {
      record.push(field);
      records.push(record);
      record = [];
      field = '';
      i++;
    } else if (c === '\n' || c === '\r' || c === '"') {
      throw new Error(`bare ${JSON.stringify(c)} at ${i}`);
    } else {
      field += c;
    }
  }
  if (field !== '' || record.length) throw new Error('the last record does not end with CRLF');
  return records;
}

describe('audit trail filters', () => {
  beforeAll(async () => {
    await insert([
      { kind: 'restart', status: 'completed', actor: 'alice', detail: 'f1', createdAt: '2030-01-01T10:00:00Z', exitCode: 0 },
      { kind: 'stop', status: 'failed', actor: 'alice', detail: 'f2', createdAt: '2030-01-01T11:00:00.000001Z', exitCode: 1 },
      { kind: 'deploy', status: 'started', actor: 'bob', detail: 'f3', createdAt: '2030-01-01T12:00:00Z' },
      { kind: 'restart', status: 'failed', actor: 'alice2', detail: 'f4', createdAt: '2030-01-01T13:00:00Z', exitCode: 2 },
      { kind: 'pull', status: 'completed', actor: 'bob', detail: 'f5', createdAt: '2030-01-01T14:00:00Z', exitCode: 0 },
    ]);
  });
  const details = async (query: string) => (await list(`since=2030-01-01T00:00:00Z&${query}`)).rows.map((r) => r.detail);

  it('by actor, exactly (no prefix or case match)', async () => {
    expect(await details('actor=alice')).toEqual(['f2', 'f1']);
    expect(await details('actor=ALICE')).toEqual([]);
    expect(await details('actor=bob')).toEqual(['f5', 'f3']);
  });

  it('by kind, one or a comma list', async () => {
    expect(await details('kind=restart')).toEqual(['f4', 'f1']);
    expect(await details('kind=restart,pull')).toEqual(['f5', 'f4', 'f1']);
    expect(await details('kind=self-update')).toEqual([]);
  });

  it('by status', async () => {
    expect(await details('status=failed')).toEqual(['f4', 'f2']);
    expect(await details('status=started')).toEqual(['f3']);
  });

  it('by time, both ends inclusive to the microsecond, with offsets', async () => {
    expect((await list('since=2030-01-01T11:00:00.000001Z&until=2030-01-01T13:00:00Z')).rows.map((r) => r.detail)).toEqual(['f4', 'f3', 'f2']);
    // A nanosecond after f2's microsecond excludes it; its microsecond exactly includes it.
    expect((await list('since=2030-01-01T11:00:00.0000011Z&until=2030-01-01T12:00:00Z')).rows.map((r) => r.detail)).toEqual(['f3']);
    expect((await list('since=2030-01-01T10:00:00Z&until=2030-01-01T11:00:00.0000019Z')).rows.map((r) => r.detail)).toEqual(['f2', 'f1']);
    expect((await list('since=2030-01-01T13:00:00%2B01:00&until=2030-01-01T12:00:00Z')).rows.map((r) => r.detail)).toEqual(['f3']);
    expect((await list('until=2030-01-01')).rows.every((r) => r.createdAt <= '2030-01-01T00:00:00.000Z')).toBe(true);
  });

  it('combined, with AND', async () => {
    expect(await details('actor=alice&kind=stop,restart&status=completed')).toEqual(['f1']);
    expect(await details('kind=restart&status=failed&until=2030-01-01T13:00:00Z')).toEqual(['f4']);
  });

  it('keeps the shape of every row the same as without filters', async () => {
    const plain = (await list('limit=500')).rows.find((r) => r.detail === 'f2');
    expect((await list('actor=alice&kind=stop')).rows[0]).toEqual(plain);
    expect(Object.keys(plain!).sort()).toEqual(['actor', 'actorEmail', 'actorKind', 'createdAt', 'detail', 'exitCode', 'finishedAt', 'id', 'jobId', 'kind', 'schemaMigration', 'status', 'targetDigest']);
  });
});

describe('bad values get a 400 naming the parameter and the rule', () => {
  const cases: [string, string, RegExp][] = [
    ['actor=', 'actor', /1-200 characters/],
    [`actor=${'a'.repeat(201)}`, 'actor', /1-200 characters/],
    ['actor=al%00ice', 'actor', /control characters/],
    ['actor=a&actor=b', 'actor', /expected string/],
    ['kind=reboot', 'kind', /one or more of restart, stop/],
    ['kind=restart,', 'kind', /separated by commas/],
    ['kind=', 'kind', /one or more of/],
    ['kind=restart&kind=stop', 'kind', /expected string/],
    ['status=done', 'status', /one of started, completed, failed/],
    ['since=yesterday', 'since', /ISO 8601/],
    ['until=2030-02-30T00:00:00Z', 'until', /ISO 8601/],
    ['since=2030-01-02T00:00:00Z&until=2030-01-01T00:00:00Z', 'since', /not be later than until/],
    ['before=abc', 'before', /id of an audit row/],
    ['before=0', 'before', /id of an audit row/],
    ['before=-5', 'before', /id of an audit row/],
    ['before=9223372036854775808', 'before', /id of an audit row/],
    ['before=99999999', 'before', /no audit row has id 99999999/],
    ['limit=501&kind=stop', 'limit', /at most 500/],
  ];
  for (const [query, name, rule] of cases) {
    it(`${query.slice(0, 40)} → 400 naming ${name}`, async () => {
      for (const path of ['/api/deployment/actions', '/api/deployment/actions.csv']) {
        if (path.endsWith('.csv') && name === 'limit') continue; // the export has no limit
        const res = await get(`${path}?${query}`);
        expect(res.statusCode, `${path} ${res.body}`).toBe(400);
        const body = res.json() as { message: string; code: string };
        expect(body.code).toBe('bad_request');
        expect(body.message).toContain(name);
        expect(body.message).toMatch(rule);
      }
    });
  }
});

describe('cursor paging', () => {
  it('walks more than 500 rows with no row lost or repeated while rows are added between pages', async () => {
    // 1,300 more rows: many share one creation time (one statement), so ties are broken by id.
    await sql`insert into deployment_actions (kind, status, actor, detail, created_at)
      select 'restart', 'completed', 'paging', 'p' || g, now() - ((g / 3) * interval '1 second') from generate_series(1, 1300) g`.execute(t.db.database.db);
    // Written without a notification (as an older build would): the cached first page is read again past its age.
    await new Promise((r) => setTimeout(r, t.settings.AUDIT_CACHE_MS + 50));
    const expected = (await sql<{ id: string }>`select id from deployment_actions order by created_at desc, id desc`.execute(t.db.database.db)).rows.map((r) => r.id);
    expect(expected.length).toBeGreaterThan(1300);

    const seen: string[] = [];
    let url: string | null = '/api/deployment/actions?limit=500'; // the first page is the cached, unfiltered one
    let pages = 0;
    while (url) {
      const res = await get(url);
      expect(res.statusCode, res.body).toBe(200);
      const rows = res.json() as Row[];
      seen.push(...rows.map((r) => r.id));
      const link = res.headers.link as string | undefined;
      url = link ? /^<([^>]+)>; rel="next"$/.exec(link)![1]! : null;
      pages++;
      // New rows between pages, written as this process and as another one would.
      await recordStarted(t.db.database.db, { kind: 'stop', actor: { id: 'between' }, detail: `between-${pages}` });
      await insert([{ kind: 'pull', status: 'started', actor: 'between', createdAt: new Date().toISOString() }]);
    }
    expect(pages).toBe(Math.ceil(expected.length / 500));
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen).toEqual(expected);
  });

  it('follows the filters in the Link, and has no Link on the last page', async () => {
    const first = await list('limit=200&actor=paging&kind=restart&status=completed');
    expect(first.rows).toHaveLength(200);
    expect(first.next).toMatch(/^\/api\/deployment\/actions\?limit=200&actor=paging&kind=restart&status=completed&before=\d+$/);
    const ids = first.rows.map((r) => r.id);
    let next = first.next;
    while (next) {
      const page = await list(next.slice(next.indexOf('?') + 1));
      ids.push(...page.rows.map((r) => r.id));
      next = page.next;
    }
    expect(ids).toHaveLength(1300);
    expect(new Set(ids).size).toBe(1300);
    // Exactly a full last page: still no Link, as no older row exists.
    const tail = await list(`limit=300&actor=paging&before=${ids[999]}`);
    expect(tail.rows.map((r) => r.id)).toEqual(ids.slice(1000));
    expect(tail.next).toBe(null);
    // A page that holds every row: no Link.
    expect((await list('limit=10&actor=bob')).next).toBe(null);
  });
});

describe('CSV export', () => {
  beforeAll(async () => {
    await insert([
      { kind: 'apply-config', status: 'failed', actor: 'csv', detail: 'comma, "quote" and\r\nnew line', createdAt: '2031-01-01T10:00:00Z', exitCode: -1 },
      { kind: 'apply-config', status: 'completed', actor: 'csv', detail: '=HYPERLINK("http://evil.example","x")', createdAt: '2031-01-01T10:00:01Z', exitCode: 0 },
      { kind: 'apply-config', status: 'completed', actor: '@SUM(A1)', detail: '+1', createdAt: '2031-01-01T10:00:02Z' },
      { kind: 'apply-config', status: 'completed', actor: 'csv', detail: '-2+3', createdAt: '2031-01-01T10:00:03Z' },
      { kind: 'apply-config', status: 'completed', actor: 'csv', detail: '\tcmd', createdAt: '2031-01-01T10:00:04Z' },
      { kind: 'apply-config', status: 'completed', actor: 'csv', detail: 'plain text', createdAt: '2031-01-01T10:00:05Z' },
    ]);
  });

  it('is an attachment with a header line, RFC 4180 quoting and a guard against formulas', async () => {
    const res = await get('/api/deployment/actions.csv?kind=apply-config');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8; header=present');
    expect(res.headers['content-disposition']).toMatch(/^attachment; filename="audit-trail-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ\.csv"$/);
    const [header, ...records] = parseCsv(res.body);
    expect(header).toEqual(['id', 'createdAt', 'finishedAt', 'actor', 'actorEmail', 'kind', 'status', 'exitCode', 'detail', 'jobId', 'targetDigest', 'schemaMigration', 'actorKind']);
    const col = (name: string) => header!.indexOf(name);
    expect(records.map((r) => r[col('detail')])).toEqual(['plain text', "'\tcmd", "'-2+3", "'+1", `'=HYPERLINK("http://evil.example","x")`, 'comma, "quote" and\r\nnew line']);
    expect(records.map((r) => r[col('actor')])).toEqual(['csv', 'csv', 'csv', "'@SUM(A1)", 'csv', 'csv']);
    // Numbers stay numbers; empty for null.
    expect(records.map((r) => r[col('exitCode')])).toEqual(['', '', '', '', '0', '-1']);
    expect(records[0]![col('createdAt')]).toBe('2031-01-01T10:00:05.000Z');
    expect(records[0]![col('finishedAt')]).toBe('');
    // The raw text: the quoted field with its doubled quotes and its line break inside.
    expect(res.body).toContain('"comma, ""quote"" and\r\nnew line"');
    expect(res.body.startsWith('id,createdAt,')).toBe(true);
  });

  it('applies the same filters, and streams every matching row, not just 500', async () => {
    const csv = async (query: string) => {
      const res = await get(`/api/deployment/actions.csv?${query}`);
      expect(res.statusCode, res.body).toBe(200);
      return parseCsv(res.body).slice(1);
    };
    const paging = await csv('actor=paging');
    expect(paging).toHaveLength(1300); // more than a batch of the export and more than the list's limit
    const fromApi: string[] = [];
    let next: string | null = 'limit=500&actor=paging';
    while (next) {
      const page = await list(next);
      fromApi.push(...page.rows.map((r) => r.id));
      next = page.next ? page.next.slice(page.next.indexOf('?') + 1) : null;
    }
    expect(paging.map((r) => r[0])).toEqual(fromApi);
    expect((await csv('actor=csv&status=failed')).map((r) => r[8])).toEqual(['comma, "quote" and\r\nnew line']);
    expect((await csv('kind=apply-config&since=2031-01-01T10:00:04Z')).map((r) => r[8])).toEqual(['plain text', "'\tcmd"]);
    expect(await csv('actor=nobody')).toEqual([]);
    const all = await csv('');
    const count = await sql<{ n: string }>`select count(*) as n from deployment_actions`.execute(t.db.database.db);
    expect(all).toHaveLength(Number(count.rows[0]!.n));
  });

  it('needs the same role as the list: any signed-in user, and no anonymous caller', async () => {
    expect((await get('/api/deployment/actions.csv', null)).statusCode).toBe(401);
    expect((await get('/api/deployment/actions.csv', viewer)).statusCode).toBe(200);
  });
});

describe('CSV export of a long trail', () => {
  it('streams 30,000 rows in order, and a client that leaves mid-file costs no error', async () => {
    await sql`insert into deployment_actions (kind, status, actor, detail, created_at)
      select 'pull', 'completed', 'bulk', 'bulk ' || g, timestamptz '2020-01-01T00:00:00Z' - g * interval '1 second' from generate_series(1, 30000) g`.execute(t.db.database.db);
    const res = await get('/api/deployment/actions.csv?actor=bulk');
    expect(res.statusCode).toBe(200);
    const records = parseCsv(res.body).slice(1);
    expect(records).toHaveLength(30000);
    expect(records[0]![8]).toBe('bulk 1');
    expect(records.at(-1)![8]).toBe('bulk 30000');

    const base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    const logged = t.logs.length;
    const first = await new Promise<string>((resolve, reject) => {
      const req = http.get(`${base}/api/deployment/actions.csv?actor=bulk`, { headers: { authorization: `Bearer ${viewer}` } }, (r) => {
        r.once('data', (chunk: Buffer) => {
          req.destroy(); // gone after the first bytes
          resolve(chunk.toString());
        });
      });
      req.on('error', (err) => (err.message === 'socket hang up' ? undefined : reject(err)));
    });
    expect(first.startsWith('id,createdAt,')).toBe(true);
    await new Promise((r) => setTimeout(r, 500));
    const errors = t.logs.slice(logged).filter((l) => (JSON.parse(l) as { level: number }).level >= 50);
    expect(errors).toEqual([]);
    expect((await get('/api/deployment/actions.csv?actor=bulk&kind=pull&until=2019-12-31T23:59:59Z')).statusCode).toBe(200);
  });
});
