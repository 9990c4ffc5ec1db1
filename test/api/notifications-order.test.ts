// Webhook keys and order (docs/notifications.md, docs/adr/0046-webhook-order-and-the-soak.md), on
// real Postgres with the delivery reconciler sending to a real local receiver:
// - an event has one key for its whole life: `update.available` observed again for the same digest
//   is the same event, not sent again while its row is there, and sent under the same key when the
//   row is gone (a database restored from a backup taken before it);
// - one endpoint's events arrive in their order: when the receiver fails the first attempt of the
//   first event, the second waits for it instead of overtaking it, and the delivery loop's timer
//   waits for the first one's retry instead of spinning on the one behind it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createJob, finishJob } from '../../src/state/jobs.ts';
import { deliveryKey, enqueueNotification, nextDeliveryInMs } from '../../src/state/notifications.ts';

const RETRY_MS = 1_500;
let t: TestApp;
let admin: string;
beforeAll(async () => {
  // Only the delivery reconciler; a first retry long enough for a later event to overtake it if it could.
  t = await startTestApp({ controllers: (w) => w.controllers.start(['notifications']), observer: false, env: { WEBHOOK_RETRY_BASE_MS: String(RETRY_MS), WEBHOOK_RETRY_MAX_MS: String(RETRY_MS) } });
  admin = await t.token('admin');
});
afterAll(async () => t?.close());

interface Hit { key: string; id: string; answered: number }
async function receiver(answer: (eventId: string, nth: number) => number): Promise<{ url: string; hits: Hit[]; server: Server }> {
  const hits: Hit[] = [];
  const seen = new Map<string, number>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const id = (JSON.parse(body) as { id: string }).id;
      const nth = (seen.get(id) ?? 0) + 1;
      seen.set(id, nth);
      const answered = answer(id, nth);
      hits.push({ key: String(req.headers['x-installer-delivery']), id, answered });
      res.statusCode = answered;
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, hits, server };
}

async function addEndpoint(url: string): Promise<string> {
  const res = await t.app.inject({ method: 'POST', url: '/api/notifications/webhooks', headers: { authorization: `Bearer ${admin}` }, payload: { url, allowPrivateNetwork: true } });
  expect(res.statusCode, res.body).toBe(201);
  return (res.json() as { id: string }).id;
}

const settled = (check: () => unknown, timeoutMs = 15_000) =>
  eventually(async () => {
    await check();
    return true;
  }, 'the expectation to hold', timeoutMs);

describe('one key per event for its whole life', () => {
  it('update.available observed again is the same event: sent once, and under the same key when its row was lost', async () => {
    const r = await receiver(() => 200);
    const db = t.db.database.db;
    try {
      const endpoint = await addEndpoint(r.url);
      const digest = `sha256:${randomUUID().replaceAll('-', '').repeat(2)}`;
      // What the observer writes at each reading of the channel that offers this digest.
      const observe = () => enqueueNotification(db, { type: 'update.available', eventId: `update.available:${digest}`, data: { channel: 'stable', currentDigest: 'sha256:old', remoteDigest: digest, composeChanged: false } });
      expect(await observe()).toBe(1);
      await settled(() => expect(r.hits).toHaveLength(1));
      expect(await observe()).toBe(0);
      expect(await observe()).toBe(0);
      // A restore of a backup taken before the event: its row is gone, and the observer sees the digest again.
      await db.deleteFrom('notification_outbox').where('endpoint_id', '=', endpoint).execute();
      expect(await observe()).toBe(1);
      await settled(() => expect(r.hits).toHaveLength(2));
      // The receiver deduplicates by key: one delivery.
      expect(new Set(r.hits.map((h) => h.key))).toEqual(new Set([deliveryKey(endpoint, `update.available:${digest}`)]));
      expect(r.hits.every((h) => h.id === `update.available:${digest}`)).toBe(true);
      const [row] = await db.selectFrom('notification_outbox').select('idempotency_key').where('endpoint_id', '=', endpoint).execute();
      expect(row!.idempotency_key).toBe(r.hits[0]!.key);
      // Another digest is another event, under another key.
      expect(deliveryKey(endpoint, `update.available:sha256:${'c'.repeat(64)}`)).not.toBe(r.hits[0]!.key);
      await t.app.inject({ method: 'DELETE', url: `/api/notifications/webhooks/${endpoint}`, headers: { authorization: `Bearer ${admin}` } });
    } finally {
      r.server.close();
    }
  });

  it('the key is per endpoint and per event, and shaped as a UUID', () => {
    const a = randomUUID();
    const b = randomUUID();
    expect(deliveryKey(a, 'job.failed:1')).toBe(deliveryKey(a, 'job.failed:1'));
    expect(deliveryKey(a, 'job.failed:1')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set([deliveryKey(a, 'job.failed:1'), deliveryKey(b, 'job.failed:1'), deliveryKey(a, 'job.failed:2')]).size).toBe(3);
  });
});

describe('one endpoint receives its events in their order', () => {
  it('a later event waits while the receiver fails the first attempt of an earlier one', async () => {
    const db = t.db.database.db;
    let first = '';
    const r = await receiver((id, nth) => (id === first && nth === 1 ? 500 : 200));
    try {
      const endpoint = await addEndpoint(r.url);
      const one = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'operator' } });
      const two = await createJob(db, { kind: 'stop', params: {}, actor: { id: 'operator' } });
      first = `job.failed:${one}`;
      await finishJob(db, one, { phase: 'failed', detail: 'exit 1', exitCode: 1 });
      await finishJob(db, two, { phase: 'failed', detail: 'exit 2', exitCode: 2 });
      await settled(() => expect(r.hits.filter((h) => h.answered === 500)).toHaveLength(1));
      // The first is waiting for its retry: the loop's next wake is that retry, not the second event behind it.
      expect(await nextDeliveryInMs(db)).toBeGreaterThan(0);
      await settled(() => expect(r.hits.filter((h) => h.answered === 200)).toHaveLength(2));
      expect(r.hits.map((h) => [h.id, h.answered])).toEqual([[`job.failed:${one}`, 500], [`job.failed:${one}`, 200], [`job.failed:${two}`, 200]]);
      await t.app.inject({ method: 'DELETE', url: `/api/notifications/webhooks/${endpoint}`, headers: { authorization: `Bearer ${admin}` } });
    } finally {
      r.server.close();
    }
  });

  it('an endpoint that fails does not hold back another endpoint', async () => {
    const db = t.db.database.db;
    const down = await receiver(() => 503);
    const up = await receiver(() => 200);
    try {
      const stuck = await addEndpoint(down.url);
      const fine = await addEndpoint(up.url);
      const jobs = [await createJob(db, { kind: 'restart', params: {}, actor: { id: 'operator' } }), await createJob(db, { kind: 'restart', params: {}, actor: { id: 'operator' } })];
      for (const j of jobs) await finishJob(db, j, { phase: 'failed', detail: 'exit 1', exitCode: 1 });
      await settled(() => expect(up.hits.map((h) => h.id)).toEqual(jobs.map((j) => `job.failed:${j}`)));
      // The failing endpoint was tried on its first event only: the second waits behind it.
      expect(new Set(down.hits.map((h) => h.id))).toEqual(new Set([`job.failed:${jobs[0]}`]));
      for (const id of [stuck, fine]) await t.app.inject({ method: 'DELETE', url: `/api/notifications/webhooks/${id}`, headers: { authorization: `Bearer ${admin}` } });
    } finally {
      down.server.close();
      up.server.close();
    }
  });
});
