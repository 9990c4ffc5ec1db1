// Who vouched for an action (docs/adr/0039-actor-kinds-and-config-reveal.md), on a listening server
// and the machine's Postgres: a person the control plane forwards is recorded and shown as
// `platform:<id>` of kind `platform-user`, whatever id it sends (a local user's, the installer's own
// actors', the control plane's name); local users, the control plane itself and the installer keep
// their own kinds; the audit list, its filters and the CSV export tell them apart; rows written
// before kinds were kept read with an unknown (null) kind.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { recordStarted } from '../../src/state/actions.ts';
import { POLICY_ACTOR, SYSTEM_ACTOR } from '../../src/auth/actor.ts';

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startTestApp();
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => t?.close());

const service = (forwarded?: string): Record<string, string> => ({
  authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`,
  ...(forwarded !== undefined ? { 'x-actor-user-id': forwarded, 'x-actor-email': `${forwarded.replace(/[^a-z]/g, '')}@example.com` } : {}),
});
const bearer = async (role: 'viewer' | 'operator' | 'admin') => ({ authorization: `Bearer ${await t.token(role)}` });

async function get(path: string, headers: Record<string, string>) {
  const res = await fetch(`${base}${path}`, { headers });
  return { status: res.status, headers: res.headers, body: await res.text() };
}
async function putPolicy(mode: string, headers: Record<string, string>) {
  const res = await fetch(`${base}/api/system/update-policy`, { method: 'PUT', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify({ mode }) });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as { updatedBy: string };
}
interface Row {
  actor: string;
  actorEmail: string | null;
  actorKind: string | null;
  detail: string | null;
}
async function rows(query: string): Promise<Row[]> {
  const res = await get(`/api/deployment/actions?limit=500&${query}`, await bearer('viewer'));
  expect(res.status, res.body).toBe(200);
  return JSON.parse(res.body) as Row[];
}

/** Ids a control plane could forward to pass for someone else: the local admin and every actor of the installer's own. */
const IMPERSONATED = ['admin', 'operator', SYSTEM_ACTOR.id, POLICY_ACTOR.id, 'cli:root', 'platform-control-plane'];

describe('actor kinds', () => {
  it('/api/auth/me shows a forwarded id as platform:<id>, never as a local user or the installer', async () => {
    for (const id of IMPERSONATED) {
      const me = await get('/api/auth/me', service(id));
      expect(me.status, me.body).toBe(200);
      expect(JSON.parse(me.body), id).toEqual({ kind: 'service', username: `platform:${id}`, actorKind: 'platform-user', role: 'operator' });
    }
    expect(JSON.parse((await get('/api/auth/me', service())).body)).toEqual({ kind: 'service', username: 'platform-control-plane', actorKind: 'control-plane', role: 'operator' });
    expect(JSON.parse((await get('/api/auth/me', await bearer('admin'))).body)).toEqual({
      kind: 'user', username: 'admin', actorKind: 'user', role: 'admin', mustChangePassword: false,
    });
  });

  it('records each kind in the audit trail, and the list, its filters and the CSV export tell them apart', async () => {
    // An old row, as a build before actor kinds wrote it: no kind.
    await sql`insert into deployment_actions (kind, status, actor, detail) values ('restart', 'completed', 'admin', 'before kinds')`.execute(t.db.database.db);
    // The local admin, then the control plane forwarding every id that could pass for someone else.
    expect((await putPolicy('notify', await bearer('admin'))).updatedBy).toBe('admin');
    for (const id of IMPERSONATED) expect((await putPolicy('manual', service(id))).updatedBy).toBe(`platform:${id}`);
    expect((await putPolicy('notify', service())).updatedBy).toBe('platform-control-plane');
    // The installer on its own (boot reconciliation, the update policy) writes through the same state functions.
    await recordStarted(t.db.database.db, { kind: 'self-update', actor: POLICY_ACTOR, detail: 'by the policy' });

    const all = await rows('');
    const kindOf = (actor: string) => all.filter((r) => r.actor === actor).map((r) => r.actorKind);
    expect(kindOf('admin')).toEqual(['user', null]); // newest first: the policy change, then the old row
    for (const id of IMPERSONATED.filter((i) => i !== 'admin')) {
      expect(kindOf(`platform:${id}`), id).toEqual(['platform-user']);
      if (id === POLICY_ACTOR.id) expect(kindOf(id)).toEqual(['system']);
      else expect(kindOf(id), id).toEqual(id === 'platform-control-plane' ? ['control-plane'] : []);
    }
    expect(kindOf('platform:admin')).toEqual(['platform-user']);
    expect(all.find((r) => r.actor === 'platform:admin')).toMatchObject({ actorEmail: 'admin@example.com' });

    // The actor filter: the local admin's rows are not the forwarded "admin"'s, and the reverse.
    expect((await rows('actor=admin')).map((r) => [r.actorKind, r.detail?.slice(0, 12)])).toEqual([
      ['user', 'update polic'],
      [null, 'before kinds'],
    ]);
    expect((await rows('actor=platform%3Aadmin')).map((r) => r.actorKind)).toEqual(['platform-user']);
    expect((await rows('actor=update-policy')).map((r) => r.actorKind)).toEqual(['system']);
    // The kind filter, one or a comma list.
    expect((await rows('actorKind=platform-user')).map((r) => r.actor).sort()).toEqual(IMPERSONATED.map((i) => `platform:${i}`).sort());
    expect((await rows('actorKind=system')).map((r) => r.actor)).toEqual(['update-policy']);
    expect((await rows('actorKind=control-plane,user')).map((r) => r.actor)).toEqual(['platform-control-plane', 'admin']);
    const bad = await get('/api/deployment/actions?actorKind=admin', await bearer('viewer'));
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body).message).toContain('actorKind: must be one or more of user, platform-user, control-plane, system');

    // The CSV export carries the kind as its last column; an old row's is empty.
    const csv = await get('/api/deployment/actions.csv?kind=restart,update-policy', await bearer('viewer'));
    expect(csv.status).toBe(200);
    const lines = csv.body.trimEnd().split('\r\n');
    expect(lines[0]!.split(',').at(-1)).toBe('actorKind');
    const byActor = new Map(lines.slice(1).map((l) => l.split(',')).map((c) => [`${c[3]}|${c.at(-1)}`, c]));
    expect([...byActor.keys()].sort()).toEqual(
      ['admin|', 'admin|user', 'platform-control-plane|control-plane', ...IMPERSONATED.map((i) => `platform:${i}|platform-user`)].sort(),
    );
  });

  it('keeps the kind on a job request, for the audit row its controller writes', async () => {
    const res = await fetch(`${base}/api/deployment/jobs`, {
      method: 'POST',
      headers: { ...service('admin'), 'content-type': 'application/json' },
      body: JSON.stringify({ action: 'stop' }),
    });
    expect(res.status).toBe(202);
    const { jobId } = (await res.json()) as { jobId: string };
    const job = JSON.parse((await get(`/api/deployment/jobs/${jobId}`, await bearer('viewer'))).body);
    expect(job).toMatchObject({ actor: 'platform:admin' });
    const row = await t.db.database.db.selectFrom('deployment_jobs').select(['actor', 'actor_kind']).where('job_id', '=', jobId).executeTakeFirstOrThrow();
    expect(row).toEqual({ actor: 'platform:admin', actor_kind: 'platform-user' });
  });
});
