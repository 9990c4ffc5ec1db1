// Webhook delivery end to end, with real processes (docs/notifications.md): a real backend on
// Postgres sends to a real local receiver (node:http) that is first down (its port closed), then
// slow (answers after the backend's timeout), then answers 500, then 200; in the middle of it the
// backend is killed with SIGKILL and another one started on the same database. Events come from
// the API (test events, failed jobs) and from the outbox written beside a state change. In the
// end every event has arrived, each under exactly one delivery key, every request correctly
// signed over its timestamp and body: a key may repeat on the wire (a send the receiver answered too late, or one cut by the
// kill), an event never arrives under two keys, and none is missing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import { createHmac } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, type Running } from '../helpers/shared/process.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { freePort } from '../helpers/shared/ports.ts';
import { createUser } from '../../src/state/users.ts';
import { enqueueNotification } from '../../src/state/notifications.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';

const TIMEOUT_MS = 400;
const BACKEND_ENV = {
  PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...TEST_SECRETS,
  // Short backoff so that the phases below see several attempts each.
  WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS), WEBHOOK_RETRY_BASE_MS: '100', WEBHOOK_RETRY_MAX_MS: '400',
  // No engine here: the jobs this test asks for fail, which is an event too.
  DOCKER_SOCKET: '/nonexistent/docker.sock',
};

type Mode = 'slow' | '500' | '200';
interface Hit { key: string; event: string; body: string; signatureOk: boolean; answered: number | 'late' }

/** A receiver on a fixed port that can be down (closed) or answer slowly, 500 or 200. */
class Receiver {
  mode: Mode = '500';
  readonly hits: Hit[] = [];
  private server: Server | null = null;
  constructor(readonly port: number, private readonly secret: () => string) {}
  get url() {
    return `http://127.0.0.1:${this.port}/installer-events`;
  }
  async up(mode: Mode): Promise<void> {
    this.mode = mode;
    if (this.server) return;
    this.server = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        // The receiver's check (docs/notifications.md): v1 is the HMAC of "<t>.<body>", t is recent.
        const t = String(req.headers['x-installer-timestamp']);
        const sig = `t=${t},v1=${createHmac('sha256', this.secret()).update(`${t}.${body}`).digest('hex')}`;
        const fresh = Math.abs(Date.now() / 1000 - Number(t)) <= 300;
        const hit: Hit = {
          key: String(req.headers['x-installer-delivery']), event: String(req.headers['x-installer-event']), body,
          signatureOk: fresh && req.headers['x-installer-signature'] === sig && req.headers['content-type'] === 'application/json', answered: 'late',
        };
        this.hits.push(hit);
        if (this.mode === 'slow') {
          setTimeout(() => {
            res.statusCode = 200;
            res.end();
          }, TIMEOUT_MS * 3).unref();
          return;
        }
        hit.answered = this.mode === '500' ? 500 : 200;
        res.statusCode = hit.answered;
        res.end();
      });
    });
    await new Promise<void>((r, j) => this.server!.once('error', j).listen(this.port, '127.0.0.1', () => r()));
  }
  async down(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (!s) return;
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
}

const until = <T>(what: string, check: () => Promise<T | null | false> | T | null | false, timeoutMs = 30_000) => eventually(check, what, timeoutMs, 100);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let db: TestDatabase;
let backend: Running | undefined;
let receiver: Receiver;
let secret = '';
const dataDir = () => mkdtempSync(path.join(tmpdir(), 'installer-webhooks-'));
const start = () => runEntry('src/main.ts', { DATABASE_URL: db.url, DATA_DIR: dataDir(), ...BACKEND_ENV });

beforeAll(async () => {
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'admin', password: 'admin-password-1', role: 'admin' });
  receiver = new Receiver(await freePort(), () => secret);
}, 60_000);
afterAll(async () => {
  await backend?.stop('SIGKILL');
  await receiver?.down();
  await db?.drop();
});

describe('webhook delivery across a down, slow and failing receiver and a SIGKILL of the backend', () => {
  it('every event arrives, under exactly one key, signed', async () => {
    backend = start();
    let base = await backend.url;
    const signIn = async () => {
      const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', password: 'admin-password-1' }) });
      expect(res.status).toBe(200);
      return { authorization: `Bearer ${((await res.json()) as { token: string }).token}` };
    };
    let auth = await signIn();
    const api = async (method: string, url: string, body?: unknown) => {
      const res = await fetch(`${base}${url}`, { method, ...(body !== undefined ? { headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) } : { headers: auth }) });
      return { status: res.status, json: (await res.json()) as Record<string, unknown> };
    };
    // The receiver is on 127.0.0.1: the admin allows this endpoint private networks.
    const add = await api('POST', '/api/notifications/webhooks', { url: receiver.url, allowPrivateNetwork: true });
    expect(add.status).toBe(201);
    const endpointId = add.json.id as string;
    secret = add.json.secret as string;

    // Down: the port is closed. Events from the API, a failed job, and ones written beside a state change.
    const tests = async (n: number) => {
      for (let i = 0; i < n; i++) expect((await api('POST', `/api/notifications/webhooks/${endpointId}/test`)).status).toBe(202);
    };
    await tests(3);
    const job = await api('POST', '/api/deployment/jobs', { action: 'stop' });
    expect(job.status).toBe(202);
    for (const type of ['self-update.completed', 'self-update.rolled-back', 'self-update.schema-alarm'] as const) {
      await enqueueNotification(db.database.db, { type, eventId: `${type}:before-kill`, data: { test: true } });
    }
    await until('the failed job to queue job.failed', async () => (await outbox()).some((r) => r.event_type === 'job.failed'));
    // One endpoint's events go out in their order: its first is tried again and again, the rest wait behind it.
    await until('several refused attempts while the receiver is down', async () => {
      const [head, ...behind] = await outbox();
      return head!.attempts >= 2 && behind.every((r) => r.attempts === 0);
    });
    expect(receiver.hits).toHaveLength(0);

    // Slow: every answer comes after the backend's timeout. Kill the backend while it waits on them.
    await receiver.up('slow');
    await until('slow attempts to reach the receiver', () => receiver.hits.length >= 3);
    await until('a timeout recorded', async () => (await outbox()).some((r) => r.last_error?.includes('no answer within')));
    await enqueueNotification(db.database.db, { type: 'self-update.failed', eventId: 'self-update.failed:during-slow', data: { test: true } });
    await sleep(150);
    await backend.stop('SIGKILL');
    expect(backend.child.signalCode).toBe('SIGKILL');

    // 500 with a new backend on the same database; more events meanwhile.
    receiver.mode = '500';
    await enqueueNotification(db.database.db, { type: 'update.available', eventId: 'update.available:sha256:between-backends', data: { test: true } });
    backend = start();
    base = await backend.url;
    auth = await signIn();
    await tests(2);
    const hitsBefore500 = receiver.hits.length;
    await until('500 answers to reach the receiver', () => receiver.hits.slice(hitsBefore500).filter((h) => h.answered === 500).length >= 4);

    // 200: everything owed is delivered.
    receiver.mode = '200';
    await tests(1);
    const rows = await until('every outbox row delivered', async () => {
      const r = await outbox();
      return r.length > 0 && r.every((x) => x.delivered_at !== null) ? r : null;
    }, 60_000);

    // Every event once: one row per event, one key per row; the receiver saw every key, 2xx for each.
    const events = new Set(rows.map((r) => r.event_id));
    expect(rows).toHaveLength(events.size);
    expect(events.size).toBe(3 + 1 + 3 + 1 + 1 + 2 + 1);
    const byKey = new Map<string, Set<string>>();
    for (const h of receiver.hits) {
      expect(h.signatureOk, `signature of ${h.key}`).toBe(true);
      const id = (JSON.parse(h.body) as { id: string }).id;
      byKey.set(h.key, (byKey.get(h.key) ?? new Set()).add(id));
    }
    // A key always names the same event, and no event arrived under two keys.
    for (const [key, ids] of byKey) expect(ids.size, key).toBe(1);
    const eventsSeen = [...byKey.values()].map((s) => [...s][0]!);
    expect(new Set(eventsSeen).size).toBe(eventsSeen.length);
    expect(new Set(eventsSeen)).toEqual(events);
    expect(new Set(byKey.keys())).toEqual(new Set(rows.map((r) => r.idempotency_key)));
    const accepted = new Set(receiver.hits.filter((h) => h.answered === 200).map((h) => h.key));
    expect(accepted).toEqual(new Set(byKey.keys()));
    // Answers that came too late (and sends cut by the kill) were sent again, under the same key.
    expect(receiver.hits.length).toBeGreaterThan(byKey.size);

    const deliveries = await api('GET', '/api/notifications/deliveries?status=delivered');
    expect(deliveries.status).toBe(200);
    expect((deliveries.json as unknown as unknown[]).length).toBe(rows.length);
    expect(backend.output()).not.toContain(secret);
    expect(await backend.stop()).toBe(0);
    backend = undefined;
  }, 180_000);
});

async function outbox() {
  return db.database.db.selectFrom('notification_outbox').select(['event_id', 'event_type', 'idempotency_key', 'attempts', 'last_error', 'delivered_at']).orderBy('id').execute();
}
