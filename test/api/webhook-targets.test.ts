// Webhooks that cannot be aimed inward (docs/notifications.md, ADR 0027), with the app on a real
// listening socket and real receivers (node:http servers this test starts on loopback and on this
// machine's own interface address):
// - an endpoint whose URL is an IP literal on loopback, link-local, a private range, CGNAT, an
//   unspecified address, an IPv4-mapped IPv6 form of these, or one of the installer's own networks
//   is refused with a 400 naming the rule unless the admin sets allowPrivateNetwork;
// - at delivery, on every connection and after resolution: `localhost`, 127.0.0.1, [::1],
//   [::ffff:127.0.0.1], 169.254.169.254 and the machine's own address are refused (the receiver
//   gets nothing; the delivery records why, and waits the longest retry delay: no storm), while the
//   same URL with the allowance reaches the same receiver (so the refusal is not an accident of
//   routing); allowing the endpoint sends what was refused at once;
// - a name that resolves to a public address and then to loopback (DNS rebinding) never reaches
//   the loopback receiver: each connection uses only the addresses it judged;
// - the signature covers the timestamp and the body: the documented check accepts a delivery,
//   refuses it replayed under a new timestamp, and refuses an old timestamp.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { ownIPv4 } from '../helpers/shared/own-address.ts';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { Sealer } from '../../src/state/platform-config.ts';
import { sendWebhook, type Resolve } from '../../src/adapters/webhook-sender.ts';

const RETRY_MAX_MS = 60_000;
let t: TestApp;
let base: string;
let admin: string;

beforeAll(async () => {
  // Only the delivery reconciler. Backoff from 50 ms: a refused delivery that were retried like a
  // failing receiver would show several attempts within a second.
  t = await startTestApp({ controllers: (w) => w.controllers.start(['notifications']), observer: false, env: { WEBHOOK_RETRY_BASE_MS: '50', WEBHOOK_RETRY_MAX_MS: String(RETRY_MAX_MS) } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  admin = await t.token('admin');
});
afterAll(async () => t?.close());

const api = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${admin}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> & Record<string, unknown>[] };
};

interface Receiver { port: number; got: { headers: IncomingMessage['headers']; body: string }[]; server: Server }
async function receiver(host: string): Promise<Receiver> {
  const got: Receiver['got'] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.end();
    });
  });
  await new Promise<void>((r, j) => server.once('error', j).listen(0, host, () => r()));
  return { port: (server.address() as AddressInfo).port, got, server };
}

/** An address of this machine on a non-loopback interface: one of the installer's own networks. */
const ownAddress = () => ownIPv4('the own-network rule needs one to test with');

/** An endpoint as one added before the rule existed (or by an older build): straight into the table, without the allowance. */
async function legacyEndpoint(url: string): Promise<string> {
  const id = randomUUID();
  await t.db.database.db.insertInto('webhook_endpoints').values({ id, url, secret_sealed: new Sealer(TEST_SECRETS.ENCRYPTION_KEY).seal('whsec_legacy'), created_by: 'admin' }).execute();
  return id;
}

async function deliveryOf(endpointId: string) {
  const res = await api('GET', `/api/notifications/deliveries?endpointId=${endpointId}`);
  expect(res.status).toBe(200);
  return (res.json as unknown as { status: string; attempts: number; lastError: string | null; nextAttemptAt: string | null }[])[0];
}

describe('creating an endpoint aimed inward', () => {
  it('refuses IP literals on loopback, link-local, private, CGNAT, unspecified, mapped and own networks with a 400 naming the rule', async () => {
    const own = ownAddress();
    const cases: [string, RegExp][] = [
      ['http://127.0.0.1:2375/containers/json', /127\.0\.0\.1 is a loopback address/],
      ['http://127.8.9.10/', /127\.8\.9\.10 is a loopback address/],
      // The URL parser reads 2130706433 and 0x7f.1 as 127.0.0.1.
      ['http://2130706433/', /127\.0\.0\.1 is a loopback address/],
      ['http://0x7f.1/', /127\.0\.0\.1 is a loopback address/],
      ['http://[::1]:8080/', /::1 is a loopback address/],
      ['http://169.254.169.254/latest/meta-data/', /169\.254\.169\.254 is a link-local address/],
      ['http://[fe80::1]/', /fe80::1 is a link-local address/],
      ['http://10.1.2.3/', /10\.1\.2\.3 is a private-network address/],
      ['http://172.16.0.9/', /private-network/],
      ['http://192.168.1.1/', /private-network/],
      ['http://[fd12:3456::1]/', /fd12:3456::1 is a private-network address/],
      ['http://100.64.0.1/', /100\.64\.0\.1 is a shared \(CGNAT\) address/],
      ['http://0.0.0.0:5432/', /0\.0\.0\.0 is an unspecified address/],
      ['http://[::]/', /:: is an unspecified address/],
      ['http://[::ffff:127.0.0.1]/', /::ffff:7f00:1 \(127\.0\.0\.1\) is a loopback address/],
      ['http://[::ffff:169.254.169.254]/', /\(169\.254\.169\.254\) is a link-local address/],
      ['http://[::ffff:10.0.0.1]/', /\(10\.0\.0\.1\) is a private-network address/],
      [`http://${own}:9/`, new RegExp(`${own.replaceAll('.', '\\.')} is (an address on one of the installer's own networks|a private-network address)`)],
    ];
    for (const [url, message] of cases) {
      const res = await api('POST', '/api/notifications/webhooks', { url });
      expect(res.status, url).toBe(400);
      expect(res.json.message, url).toMatch(message);
      expect(res.json.message, url).toMatch(/webhooks may not reach loopback, link-local, private or reserved addresses or the installer's own networks unless an admin sets allowPrivateNetwork/);
    }
    const rows = await t.db.database.db.selectFrom('webhook_endpoints').select('url').execute();
    expect(rows).toEqual([]);

    // With the allowance, the admin may; and a public address or a name needs none.
    const allowed = await api('POST', '/api/notifications/webhooks', { url: 'http://169.254.169.254/x', allowPrivateNetwork: true });
    expect(allowed.status, JSON.stringify(allowed.json)).toBe(201);
    expect(allowed.json).toMatchObject({ allowPrivateNetwork: true });
    for (const url of ['https://198.51.100.7/hook', 'http://localhost:9/judged-at-delivery', 'https://hooks.example.com/x']) {
      const res = await api('POST', '/api/notifications/webhooks', { url });
      expect(res.status, url).toBe(201);
      expect(res.json).toMatchObject({ allowPrivateNetwork: false });
      await api('DELETE', `/api/notifications/webhooks/${res.json.id as string}`);
    }
    const bad = await api('POST', '/api/notifications/webhooks', { url: 'https://example.com/', allowPrivateNetwork: 'yes' });
    expect(bad.status).toBe(400);
    expect(bad.json.message).toMatch(/allowPrivateNetwork must be true or false/);
    await api('DELETE', `/api/notifications/webhooks/${allowed.json.id as string}`);
  });
});

describe('deliveries aimed inward', () => {
  it('refuses localhost, 127.0.0.1, [::1], [::ffff:127.0.0.1], 169.254.169.254 and the own address at delivery, and reaches the same receivers once allowed', async () => {
    const v4 = await receiver('127.0.0.1');
    const v6 = await receiver('::1');
    const own = ownAddress();
    const onOwn = await receiver(own);
    try {
      const targets: { url: string; reason: RegExp; r: Receiver | null }[] = [
        // A name: accepted when added, judged when resolved.
        { url: `http://localhost:${v4.port}/hook`, reason: /^refused: localhost resolves to (127\.0\.0\.1|::1), a loopback address; webhooks may not reach/, r: v4 },
        { url: `http://127.0.0.1:${v4.port}/hook`, reason: /^refused: 127\.0\.0\.1 is a loopback address/, r: v4 },
        { url: `http://[::1]:${v6.port}/hook`, reason: /^refused: ::1 is a loopback address/, r: v6 },
        { url: `http://[::ffff:127.0.0.1]:${v4.port}/hook`, reason: /^refused: ::ffff:7f00:1 \(127\.0\.0\.1\) is a loopback address/, r: v4 },
        { url: 'http://169.254.169.254/latest/meta-data/', reason: /^refused: 169\.254\.169\.254 is a link-local address/, r: null },
        { url: `http://${own}:${onOwn.port}/hook`, reason: new RegExp(`^refused: ${own.replaceAll('.', '\\.')} is (an address on one of the installer's own networks|a private-network address)`), r: onOwn },
      ];
      const ids: string[] = [];
      for (const target of targets) {
        // `localhost` goes through the API (a name is accepted); literals as endpoints added before the rule.
        if (target.url.includes('localhost')) {
          const res = await api('POST', '/api/notifications/webhooks', { url: target.url });
          expect(res.status).toBe(201);
          ids.push(res.json.id as string);
        } else ids.push(await legacyEndpoint(target.url));
      }
      for (const id of ids) expect((await api('POST', `/api/notifications/webhooks/${id}/test`)).status).toBe(202);
      for (const [i, target] of targets.entries()) {
        const d = await eventually(async () => {
          const x = await deliveryOf(ids[i]!);
          return x?.lastError ? x : null;
        }, `the refusal of ${target.url}`);
        expect(d.lastError, target.url).toMatch(target.reason);
        expect(d.status, target.url).toBe('pending');
      }
      // No retry storm: with a 50 ms backoff base, a refused delivery still waits the longest delay.
      await new Promise((r) => setTimeout(r, 1_000));
      for (const [i, target] of targets.entries()) {
        const d = (await deliveryOf(ids[i]!))!;
        expect(d.attempts, target.url).toBe(1);
        expect(new Date(d.nextAttemptAt!).getTime() - Date.now(), target.url).toBeGreaterThan(RETRY_MAX_MS - 5_000);
      }
      expect(v4.got.length + v6.got.length + onOwn.got.length).toBe(0);
      expect(t.logs.join('')).toContain('webhook delivery refused');
      // An endpoint added before the rule can still be disabled and enabled as it is.
      for (const enabled of [false, true]) expect((await api('PATCH', `/api/notifications/webhooks/${ids[1]!}`, { enabled })).status).toBe(200);

      // The admin allows each endpoint: what was refused goes out at once, to the very receiver
      // the URL names (the refusal was the rule's, not the network's).
      for (const [i, target] of targets.entries()) {
        if (!target.r) continue;
        const before = target.r.got.length;
        const res = await api('PATCH', `/api/notifications/webhooks/${ids[i]!}`, { allowPrivateNetwork: true });
        expect(res.status, JSON.stringify(res.json)).toBe(200);
        await eventually(() => target.r!.got.length > before, `the delivery to ${target.url} once allowed`);
        await eventually(async () => (await deliveryOf(ids[i]!))?.status === 'delivered', `${target.url} delivered`);
      }
      const audit = await t.db.database.db.selectFrom('deployment_actions').select('detail').where('kind', '=', 'webhook').execute();
      expect(audit.filter((a) => a.detail?.endsWith(': private network allowed'))).toHaveLength(targets.filter((x) => x.r).length);
      for (const id of ids) await api('DELETE', `/api/notifications/webhooks/${id}`);
    } finally {
      for (const r of [v4, v6, onOwn]) r.server.close();
    }
  });
});

describe('the check is made on the connection, after resolution', () => {
  const delivery = { url: '', secret: 'whsec_x', eventType: 'test', idempotencyKey: randomUUID(), body: '{}' };

  it('a name that rebinds from a public address to loopback never reaches the loopback receiver', async () => {
    const r = await receiver('127.0.0.1');
    try {
      // The attacker's DNS: a public address the first time, loopback every time after.
      const calls: string[] = [];
      const rebinding: Resolve = (hostname, cb) => {
        calls.push(hostname);
        cb(null, [{ address: calls.length === 1 ? '198.51.100.7' : '127.0.0.1', family: 4 }]);
      };
      const url = `http://rebind.example:${r.port}/hook`;
      // First connection: the public address it judged is the one it dials (unreachable here: it times out or fails).
      const first = await sendWebhook({ ...delivery, url }, { timeoutMs: 500, resolve: rebinding });
      expect(first.ok).toBe(false);
      expect(first).not.toHaveProperty('refused');
      // Second connection: resolved again, judged again, refused.
      const second = await sendWebhook({ ...delivery, url }, { timeoutMs: 500, resolve: rebinding });
      expect(second).toMatchObject({ ok: false, refused: true, error: expect.stringMatching(/^refused: rebind\.example resolves to 127\.0\.0\.1, a loopback address/) });
      expect(calls).toEqual(['rebind.example', 'rebind.example']);
      // A name with a public and a loopback address at once is refused whole: no fallback to loopback.
      const both: Resolve = (_h, cb) => cb(null, [{ address: '198.51.100.7', family: 4 }, { address: '127.0.0.1', family: 4 }]);
      expect(await sendWebhook({ ...delivery, url }, { timeoutMs: 500, resolve: both })).toMatchObject({ ok: false, refused: true });
      expect(r.got).toHaveLength(0);
      // The same name, allowed, reaches it: the refusals above were the rule's.
      const allowed = await sendWebhook({ ...delivery, url, allowPrivateNetwork: true }, { timeoutMs: 2_000, resolve: rebinding });
      expect(allowed).toMatchObject({ ok: true, status: 200 });
      expect(r.got).toHaveLength(1);
      expect(r.got[0]!.headers.host).toBe(`rebind.example:${r.port}`);
    } finally {
      r.server.close();
    }
  });
});

describe('the signature covers the timestamp and the body', () => {
  /** The receiver's check, as docs/notifications.md gives it. */
  function verified(rawBody: string, header: string | undefined, secret: string, toleranceSeconds = 300, now = Date.now()): boolean {
    const parts = Object.fromEntries((header ?? '').split(',').map((p) => {
      const i = p.indexOf('=');
      return [p.slice(0, i), p.slice(i + 1)];
    }));
    const t = Number(parts.t);
    if (!Number.isInteger(t) || Math.abs(now / 1000 - t) > toleranceSeconds) return false;
    const expected = Buffer.from(createHmac('sha256', secret).update(`${parts.t}.`).update(rawBody).digest('hex'));
    const got = Buffer.from(parts.v1 ?? '');
    return got.length === expected.length && timingSafeEqual(got, expected);
  }

  it('a receiver accepts the delivery, refuses it replayed under a fresh timestamp, and refuses an old one', async () => {
    const r = await receiver('127.0.0.1');
    try {
      const secret = 'whsec_' + 'ab'.repeat(32);
      const body = JSON.stringify({ id: 'test:1', type: 'test', occurredAt: new Date().toISOString(), data: {} });
      const d = { url: `http://127.0.0.1:${r.port}/hook`, secret, eventType: 'test', idempotencyKey: randomUUID(), body, allowPrivateNetwork: true };
      expect(await sendWebhook(d, { timeoutMs: 2_000 })).toMatchObject({ ok: true });
      const hit = r.got[0]!;
      const header = String(hit.headers['x-installer-signature']);
      expect(header).toMatch(/^t=(\d+),v1=[0-9a-f]{64}$/);
      expect(header.slice(2, header.indexOf(','))).toBe(String(hit.headers['x-installer-timestamp']));
      expect(verified(hit.body, header, secret)).toBe(true);
      // Replayed later: the old signature under a new t does not verify; a changed body neither.
      const fresh = String(Math.floor(Date.now() / 1000) + 600);
      expect(verified(hit.body, header.replace(/^t=\d+/, `t=${fresh}`), secret, 300, Number(fresh) * 1000)).toBe(false);
      expect(verified(hit.body.replace('test:1', 'test:2'), header, secret)).toBe(false);
      // Replayed as it was, an hour on: the timestamp is too old.
      expect(verified(hit.body, header, secret, 300, Date.now() + 3_600_000)).toBe(false);
      // A delivery signed an hour ago (the installer's clock) is refused by the same check.
      expect(await sendWebhook({ ...d, idempotencyKey: randomUUID() }, { timeoutMs: 2_000, now: () => new Date(Date.now() - 3_600_000) })).toMatchObject({ ok: true });
      const old = r.got[1]!;
      expect(verified(old.body, String(old.headers['x-installer-signature']), secret)).toBe(false);
    } finally {
      r.server.close();
    }
  });
});
