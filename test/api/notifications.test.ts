// Webhook endpoints from the API (docs/notifications.md): admins add, change, disable, test and
// remove them and read the deliveries; viewers, operators and the service token are refused; bad
// input is a 400 naming the rule, an unknown id a 404, never a 500; the secret is answered once,
// at creation, and appears nowhere after (answers, logs, audit rows, the database in clear). Each
// change is an audit row of kind `webhook`. The events queued in the transactions that cause them
// (a failed job, once; update.available, once per digest) and a `test` delivery, signed, reaching
// a real local receiver through the notifications reconciler. The receivers listen on 127.0.0.1,
// which a webhook may reach only when an admin allows private networks on the endpoint: every
// endpoint here that expects a delivery sets allowPrivateNetwork (the refusals are proved in
// webhook-targets.test.ts).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createHmac, randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';

/** Waits until `check` stops throwing (its last failure is the message). */
const settled = (check: () => unknown, opts: { timeoutMs?: number } = {}) =>
  eventually(async () => {
    await check();
    return true;
  }, 'the expectation to hold', opts.timeoutMs ?? 10_000);
import { createJob, finishJob } from '../../src/state/jobs.ts';
import { enqueueNotification } from '../../src/state/notifications.ts';
import { pruneExpired } from '../../src/state/retention.ts';
import { retryDelayMs } from '../../controllers/notifications.ts';
import { notificationOf } from '../../machines/self-update-outcome.machine.ts';

let t: TestApp;
let admin: string;
beforeAll(async () => {
  // Only the delivery reconciler: the other controllers would reach for the engine.
  t = await startTestApp({ controllers: (w) => w.controllers.start(['notifications']), observer: false, env: { WEBHOOK_RETRY_BASE_MS: '50', WEBHOOK_RETRY_MAX_MS: '200' } });
  admin = await t.token('admin');
});
afterAll(async () => t?.close());

const call = (method: string, url: string, token: string, payload?: unknown) =>
  t.app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${token}` }, ...(payload !== undefined ? { payload: payload as object } : {}) });

interface Received { headers: IncomingMessage['headers']; body: string; path: string }
async function receiver(answer: (r: Received) => number = () => 200): Promise<{ url: string; got: Received[]; server: Server }> {
  const got: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const r = { headers: req.headers, body, path: req.url ?? '' };
      got.push(r);
      res.statusCode = answer(r);
      // A redirect names another path of this receiver: a request there would mean it was followed.
      if (res.statusCode >= 300 && res.statusCode < 400) res.setHeader('location', '/elsewhere');
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got, server };
}

/** The signature a receiver expects: `t=<timestamp>,v1=<HMAC-SHA256 of "<t>.<body>">` (docs/notifications.md). */
const signed = (secret: string, headers: IncomingMessage['headers'], body: string) => {
  const t = String(headers['x-installer-timestamp']);
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
};

async function addEndpoint(url: string): Promise<{ id: string; secret: string }> {
  const res = await call('POST', '/api/notifications/webhooks', admin, { url, allowPrivateNetwork: true });
  expect(res.statusCode, res.body).toBe(201);
  return res.json();
}

describe('webhook endpoints from the API', () => {
  it('adds an endpoint and answers its secret once; lists, changes, disables and removes it, each audited', async () => {
    const add = await call('POST', '/api/notifications/webhooks', admin, { url: 'https://hooks.example.com/services/T000/B000/tok3n' });
    expect(add.statusCode, add.body).toBe(201);
    const created = add.json() as { id: string; secret: string; url: string; enabled: boolean; createdBy: string };
    expect(created).toMatchObject({ url: 'https://hooks.example.com/services/T000/B000/tok3n', enabled: true, createdBy: 'admin' });
    expect(created.secret).toMatch(/^whsec_[0-9a-f]{64}$/);

    const list = await call('GET', '/api/notifications/webhooks', admin);
    expect(list.statusCode).toBe(200);
    const listed = (list.json() as { id: string }[]).find((e) => e.id === created.id);
    expect(listed).toMatchObject({ id: created.id, enabled: true });
    expect(list.body).not.toContain(created.secret);
    expect(Object.keys(listed!)).not.toContain('secret');

    const disable = await call('PATCH', `/api/notifications/webhooks/${created.id}`, admin, { enabled: false });
    expect(disable.statusCode, disable.body).toBe(200);
    expect(disable.json()).toMatchObject({ enabled: false });
    expect(disable.body).not.toContain(created.secret);
    // A private address needs the admin's explicit allowance on the endpoint.
    const refused = await call('PATCH', `/api/notifications/webhooks/${created.id}`, admin, { url: 'http://10.0.0.7:9000/in', enabled: true });
    expect(refused.statusCode, refused.body).toBe(400);
    expect(refused.json().message).toMatch(/^url 10\.0\.0\.7 is a private-network address: webhooks may not reach .* unless an admin sets allowPrivateNetwork/);
    const moved = await call('PATCH', `/api/notifications/webhooks/${created.id}`, admin, { url: 'http://10.0.0.7:9000/in', enabled: true, allowPrivateNetwork: true });
    expect(moved.statusCode, moved.body).toBe(200);
    expect(moved.json()).toMatchObject({ url: 'http://10.0.0.7:9000/in', enabled: true, allowPrivateNetwork: true });
    // Nor can the allowance be taken back while the URL needs it.
    const back = await call('PATCH', `/api/notifications/webhooks/${created.id}`, admin, { allowPrivateNetwork: false });
    expect(back.statusCode, back.body).toBe(400);
    expect(back.json().message).toMatch(/^url 10\.0\.0\.7 is a private-network address/);

    const removed = await call('DELETE', `/api/notifications/webhooks/${created.id}`, admin);
    expect(removed.statusCode, removed.body).toBe(200);
    expect(removed.json()).toEqual({ removed: created.id });
    expect((await call('DELETE', `/api/notifications/webhooks/${created.id}`, admin)).statusCode).toBe(404);

    const audit = await t.db.database.db.selectFrom('deployment_actions').select(['kind', 'status', 'actor', 'detail']).where('kind', '=', 'webhook').orderBy('id').execute();
    const mine = audit.filter((a) => a.detail?.includes(created.id));
    expect(mine.map((a) => a.detail)).toEqual([
      `added webhook ${created.id} (https://hooks.example.com/…)`,
      `changed webhook ${created.id}: disabled`,
      `changed webhook ${created.id}: url https://hooks.example.com/… -> http://10.0.0.7:9000/…, private network allowed, enabled`,
      `removed webhook ${created.id} (http://10.0.0.7:9000/…)`,
    ]);
    expect(mine.every((a) => a.status === 'completed' && a.actor === 'admin')).toBe(true);
    // The token in the URL's path stays out of the audit trail and the logs.
    expect(JSON.stringify(audit)).not.toContain('tok3n');

    // The secret: nowhere but in that one answer, and sealed at rest.
    const logs = t.logs.join('');
    expect(logs).toContain('"change":"added"');
    expect(logs).not.toContain(created.secret);
    expect(logs).not.toContain('tok3n');
    const row = await t.db.database.db.selectFrom('deployment_actions').selectAll().execute();
    expect(JSON.stringify(row)).not.toContain(created.secret);
  });

  it('refuses bad input with a 400 naming the rule, and an unknown id with a 404', async () => {
    const cases: [unknown, RegExp][] = [
      [{ url: 'not a url' }, /url must be an absolute URL/],
      [{ url: 'ftp://example.com/x' }, /url must use http or https, not ftp/],
      [{ url: 'file:///etc/passwd' }, /url must use http or https, not file/],
      [{ url: 'javascript:alert(1)' }, /url must use http or https/],
      [{ url: 'https://user:pw@example.com/x' }, /must not hold a user name or password/],
      [{ url: `https://example.com/${'a'.repeat(2100)}` }, /at most 2000 characters/],
      [{ url: 42 }, /url must be a string/],
      [{}, /url/],
      [{ url: 'https://example.com/', secret: 'mine' }, /secret|Unrecognized|unrecognized/],
    ];
    for (const [body, message] of cases) {
      const res = await call('POST', '/api/notifications/webhooks', admin, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json().message, JSON.stringify(body)).toMatch(message);
    }
    const { id } = await addEndpoint('https://example.com/ok');
    const patch = [
      [{}, /give url or enabled/],
      [{ enabled: 'yes' }, /enabled must be true or false/],
      [{ url: 'gopher://x' }, /http or https/],
    ] as const;
    for (const [body, message] of patch) {
      const res = await call('PATCH', `/api/notifications/webhooks/${id}`, admin, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json().message).toMatch(message);
    }
    const unknown = randomUUID();
    for (const [method, url, body] of [
      ['PATCH', `/api/notifications/webhooks/${unknown}`, { enabled: false }],
      ['DELETE', `/api/notifications/webhooks/${unknown}`, undefined],
      ['POST', `/api/notifications/webhooks/${unknown}/test`, undefined],
    ] as const) {
      const res = await call(method, url, admin, body);
      expect(res.statusCode, `${method} ${url}`).toBe(404);
      expect(res.json()).toMatchObject({ code: 'not_found', message: `no webhook endpoint ${unknown}` });
    }
    const notUuid = await call('PATCH', '/api/notifications/webhooks/not-an-id', admin, { enabled: false });
    expect(notUuid.statusCode).toBe(400);
    expect(notUuid.json().message).toMatch(/id must be a webhook endpoint id/);
    for (const q of ['limit=0', 'limit=x', 'limit=501', 'status=lost', 'endpointId=x']) {
      const res = await call('GET', `/api/notifications/deliveries?${q}`, admin);
      expect(res.statusCode, q).toBe(400);
    }
    await call('DELETE', `/api/notifications/webhooks/${id}`, admin);
  });

  it('is for admins only: viewers, operators and the service token get 403, no token 401', async () => {
    const { id } = await addEndpoint('https://example.com/access');
    const routes: [string, string, unknown][] = [
      ['GET', '/api/notifications/webhooks', undefined],
      ['POST', '/api/notifications/webhooks', { url: 'https://example.com/x' }],
      ['PATCH', `/api/notifications/webhooks/${id}`, { enabled: false }],
      ['DELETE', `/api/notifications/webhooks/${id}`, undefined],
      ['POST', `/api/notifications/webhooks/${id}/test`, undefined],
      ['GET', '/api/notifications/deliveries', undefined],
    ];
    for (const [method, url, body] of routes) {
      for (const token of [await t.token('viewer'), await t.token('operator'), TEST_SECRETS.SERVICE_TOKEN]) {
        const res = await call(method, url, token, body);
        expect(res.statusCode, `${method} ${url}`).toBe(403);
      }
      const anon = await t.app.inject({ method: method as 'GET', url });
      expect(anon.statusCode).toBe(401);
    }
    const still = await call('GET', '/api/notifications/webhooks', admin);
    expect((still.json() as { id: string; enabled: boolean }[]).find((e) => e.id === id)).toMatchObject({ enabled: true });
    await call('DELETE', `/api/notifications/webhooks/${id}`, admin);
  });
});

describe('deliveries', () => {
  it('a test event reaches a real receiver, signed with the secret, and shows as delivered', async () => {
    const r = await receiver();
    try {
      const { id, secret } = await addEndpoint(r.url);
      const test = await call('POST', `/api/notifications/webhooks/${id}/test`, admin);
      expect(test.statusCode, test.body).toBe(202);
      const { idempotencyKey, eventId } = test.json() as { idempotencyKey: string; eventId: string };
      await settled(() => expect(r.got.length).toBe(1));
      const got = r.got[0]!;
      expect(got.headers['content-type']).toBe('application/json');
      expect(got.headers['x-installer-event']).toBe('test');
      expect(got.headers['x-installer-delivery']).toBe(idempotencyKey);
      expect(Number(got.headers['x-installer-timestamp'])).toBeGreaterThan(Date.now() / 1000 - 60);
      // Signed over the timestamp and the body.
      expect(got.headers['x-installer-signature']).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
      expect(got.headers['x-installer-signature']).toBe(signed(secret, got.headers, got.body));
      expect(JSON.parse(got.body)).toMatchObject({ id: eventId, type: 'test', data: { endpointId: id, requestedBy: 'admin' } });
      await settled(async () => {
        const d = (await call('GET', `/api/notifications/deliveries?endpointId=${id}`, admin)).json() as { status: string; attempts: number; lastStatus: number }[];
        expect(d).toHaveLength(1);
        expect(d[0]).toMatchObject({ status: 'delivered', attempts: 1, lastStatus: 200, idempotencyKey });
      });
      expect(t.logs.join('')).not.toContain(secret);
      await call('DELETE', `/api/notifications/webhooks/${id}`, admin);
    } finally {
      r.server.close();
    }
  });

  it('a failed job reaches the receiver as job.failed, with any secret in its detail scrubbed', async () => {
    const r = await receiver();
    try {
      const { id, secret } = await addEndpoint(r.url);
      const db = t.db.database.db;
      const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'operator' } });
      await finishJob(db, jobId, { phase: 'failed', detail: `compose printed ${TEST_SECRETS.SERVICE_TOKEN}`, exitCode: 1 });
      await settled(() => expect(r.got.some((g) => g.headers['x-installer-event'] === 'job.failed')).toBe(true));
      const got = r.got.find((g) => g.headers['x-installer-event'] === 'job.failed')!;
      expect(got.body).not.toContain(TEST_SECRETS.SERVICE_TOKEN);
      expect(JSON.parse(got.body)).toMatchObject({ id: `job.failed:${jobId}`, type: 'job.failed', data: { jobId, kind: 'restart', actor: 'operator', detail: 'compose printed [REDACTED]', exitCode: 1 } });
      // Signed as sent.
      expect(got.headers['x-installer-signature']).toBe(signed(secret, got.headers, got.body));
      await call('DELETE', `/api/notifications/webhooks/${id}`, admin);
    } finally {
      r.server.close();
    }
  });

  it('retries an endpoint that answers 500 or redirects, with the same key, until it answers 2xx', async () => {
    let n = 0;
    const r = await receiver(() => [500, 302, 503, 204][Math.min(n++, 3)]!);
    try {
      const { id } = await addEndpoint(r.url);
      const key = ((await call('POST', `/api/notifications/webhooks/${id}/test`, admin)).json() as { idempotencyKey: string }).idempotencyKey;
      await settled(() => expect(r.got.length).toBe(4), { timeoutMs: 10_000 });
      expect(new Set(r.got.map((g) => g.headers['x-installer-delivery']))).toEqual(new Set([key]));
      expect(r.got.map((g) => g.path)).toEqual(['/hook', '/hook', '/hook', '/hook']);
      await settled(async () => {
        const [d] = (await call('GET', `/api/notifications/deliveries?endpointId=${id}`, admin)).json() as { status: string; attempts: number; lastStatus: number }[];
        expect(d).toMatchObject({ status: 'delivered', attempts: 4, lastStatus: 204, lastError: null });
      });
      await call('DELETE', `/api/notifications/webhooks/${id}`, admin);
    } finally {
      r.server.close();
    }
  });

  it('a disabled endpoint is sent nothing until enabled again; no event is queued for it meanwhile', async () => {
    const r = await receiver();
    try {
      const { id } = await addEndpoint(r.url);
      await call('POST', `/api/notifications/webhooks/${id}/test`, admin);
      await settled(() => expect(r.got.length).toBe(1));
      await call('PATCH', `/api/notifications/webhooks/${id}`, admin, { enabled: false });
      // A test of a disabled endpoint is queued (an admin checks it) but waits.
      await call('POST', `/api/notifications/webhooks/${id}/test`, admin);
      const eventId = `update.available:sha256:${randomUUID()}`;
      await enqueueNotification(t.db.database.db, { type: 'update.available', eventId, data: {} });
      const queued = await t.db.database.db.selectFrom('notification_outbox').select('endpoint_id').where('event_id', '=', eventId).execute();
      expect(queued.map((q) => q.endpoint_id)).not.toContain(id);
      await new Promise((res) => setTimeout(res, 500));
      expect(r.got.length).toBe(1);
      const pending = (await call('GET', `/api/notifications/deliveries?endpointId=${id}&status=pending`, admin)).json() as unknown[];
      expect(pending).toHaveLength(1);
      await call('PATCH', `/api/notifications/webhooks/${id}`, admin, { enabled: true });
      await settled(() => expect(r.got.length).toBe(2));
      await call('DELETE', `/api/notifications/webhooks/${id}`, admin);
    } finally {
      r.server.close();
    }
  });

  it('gives up after the give-up age and shows the delivery as failed', async () => {
    const g = await startTestApp({ controllers: (w) => w.controllers.start(['notifications']), observer: false, env: { WEBHOOK_RETRY_BASE_MS: '20', WEBHOOK_RETRY_MAX_MS: '50', WEBHOOK_GIVE_UP_MINUTES: '0.01' } });
    const r = await receiver(() => 500);
    try {
      const a = await g.token('admin');
      const add = await g.app.inject({ method: 'POST', url: '/api/notifications/webhooks', headers: { authorization: `Bearer ${a}` }, payload: { url: r.url, allowPrivateNetwork: true } });
      const { id } = add.json() as { id: string };
      await g.app.inject({ method: 'POST', url: `/api/notifications/webhooks/${id}/test`, headers: { authorization: `Bearer ${a}` } });
      await settled(async () => {
        const res = await g.app.inject({ method: 'GET', url: '/api/notifications/deliveries', headers: { authorization: `Bearer ${a}` } });
        const [d] = res.json() as { status: string; lastStatus: number; lastError: string; failedAt: string | null; nextAttemptAt: string | null }[];
        expect(d).toMatchObject({ status: 'failed', lastStatus: 500, lastError: 'answered 500', nextAttemptAt: null });
        expect(d!.failedAt).not.toBeNull();
      }, { timeoutMs: 10_000 });
      const count = r.got.length;
      await new Promise((res) => setTimeout(res, 300));
      expect(r.got.length).toBe(count);
      expect(g.logs.join('')).toContain('gave up retrying');
    } finally {
      r.server.close();
      await g.close();
    }
  });
});

describe('events queued with the change that causes them', () => {
  it('a failed job queues job.failed once, for each enabled endpoint; a completed job queues nothing', async () => {
    const db = t.db.database.db;
    const on = await addEndpoint('http://127.0.0.1:9/on');
    const off = await addEndpoint('http://127.0.0.1:9/off');
    await call('PATCH', `/api/notifications/webhooks/${off.id}`, admin, { enabled: false });
    const failing = await createJob(db, { kind: 'stop', params: {}, actor: { id: 'admin' } });
    expect(await finishJob(db, failing, { phase: 'failed', detail: 'exit 1', exitCode: 1 })).toBe(true);
    expect(await finishJob(db, failing, { phase: 'failed', detail: 'again', exitCode: 1 })).toBe(false);
    const ok = await createJob(db, { kind: 'stop', params: {}, actor: { id: 'admin' } });
    await finishJob(db, ok, { phase: 'completed', detail: null, exitCode: 0 });
    const rows = await db.selectFrom('notification_outbox').select(['endpoint_id', 'event_id', 'event_type', 'body']).where('event_type', '=', 'job.failed').execute();
    expect(rows.map((r) => [r.endpoint_id, r.event_id])).toEqual([[on.id, `job.failed:${failing}`]]);
    expect(JSON.parse(rows[0]!.body)).toMatchObject({ id: `job.failed:${failing}`, type: 'job.failed', data: { jobId: failing, kind: 'stop', actor: 'admin', detail: 'exit 1', exitCode: 1 } });
    await call('DELETE', `/api/notifications/webhooks/${on.id}`, admin);
    await call('DELETE', `/api/notifications/webhooks/${off.id}`, admin);
  });

  it('update.available is queued once per remote digest', async () => {
    const db = t.db.database.db;
    const { id } = await addEndpoint('http://127.0.0.1:9/digest');
    const digest = `sha256:${'a'.repeat(64)}`;
    for (let i = 0; i < 3; i++) await enqueueNotification(db, { type: 'update.available', eventId: `update.available:${digest}`, data: { remoteDigest: digest } });
    await enqueueNotification(db, { type: 'update.available', eventId: `update.available:sha256:${'b'.repeat(64)}`, data: {} });
    const rows = await db.selectFrom('notification_outbox').select('event_id').where('endpoint_id', '=', id).execute();
    expect(rows.map((r) => r.event_id).sort()).toEqual([`update.available:${digest}`, `update.available:sha256:${'b'.repeat(64)}`]);
    await call('DELETE', `/api/notifications/webhooks/${id}`, admin);
  });

  it('pruning keeps what is owed and the update.available rows, and drops old delivered and failed ones', async () => {
    const db = t.db.database.db;
    const { id } = await addEndpoint('http://127.0.0.1:9/prune');
    await call('PATCH', `/api/notifications/webhooks/${id}`, admin, { enabled: false });
    const rows = [
      { event_id: 'old-delivered', event_type: 'job.failed', delivered_at: new Date('2020-01-02'), failed_at: null },
      { event_id: 'old-failed', event_type: 'job.failed', delivered_at: null, failed_at: new Date('2020-01-03') },
      { event_id: 'old-owed', event_type: 'job.failed', delivered_at: null, failed_at: null },
      { event_id: 'update.available:sha256:old', event_type: 'update.available', delivered_at: new Date('2020-01-02'), failed_at: null },
    ];
    for (const r of rows) {
      await db.insertInto('notification_outbox').values({ ...r, endpoint_id: id, idempotency_key: randomUUID(), body: '{}', created_at: new Date('2020-01-01') }).execute();
    }
    // Batches of 100 rows: the other tests' rows of this file are recent and stay.
    expect((await pruneExpired(db, { jobEventDays: 30, batchRows: 100, batchTimeoutMs: 5_000 }, new AbortController().signal)).deliveries).toBe(2);
    const left = await db.selectFrom('notification_outbox').select('event_id').where('endpoint_id', '=', id).execute();
    expect(left.map((r) => r.event_id).sort()).toEqual(['old-owed', 'update.available:sha256:old']);
    await call('DELETE', `/api/notifications/webhooks/${id}`, admin);
  });

  it('maps self-update outcomes to events', () => {
    expect(notificationOf('completed', 'ok')).toBe('self-update.completed');
    expect(notificationOf('rolled-back', 'rolled-back')).toBe('self-update.rolled-back');
    expect(notificationOf('rolled-back-onto-changed-schema', 'rolled-back')).toBe('self-update.rolled-back');
    expect(notificationOf('rolled-back', 'failed')).toBe('self-update.failed');
    expect(notificationOf('neither', null)).toBe('self-update.failed');
  });

  it('backs off exponentially with jitter, capped', () => {
    const p = { baseMs: 1_000, maxMs: 300_000 };
    expect([1, 2, 3, 4].map((a) => retryDelayMs(a, p, () => 1))).toEqual([1_000, 2_000, 4_000, 8_000]);
    expect(retryDelayMs(1, p, () => 0)).toBe(500);
    expect(retryDelayMs(30, p, () => 1)).toBe(300_000);
    expect(retryDelayMs(500, p, () => 0.5)).toBe(225_000);
  });
});
