// Sends one webhook delivery (docs/notifications.md): a POST of the stored JSON body, signed with
// the endpoint's secret over the attempt's timestamp and the raw body, with a per-request timeout
// and no redirects followed (a 3xx is an answer that is not a success). It never throws: the
// outcome says what happened, for the delivery reconciler to record. It logs nothing (the secret
// is in its hands).
//
// Where it may connect is decided on the connection itself: the host name is resolved by this
// module's `lookup`, every address it gives is judged (src/webhook-targets.ts), and the socket is
// handed only the addresses that were judged, so a name that resolves to a public address when
// checked and to 127.0.0.1 when connecting (DNS rebinding) cannot get through. An IP literal is
// judged before the request. Nothing is followed, so nothing else is ever connected to.
import { createHmac } from 'node:crypto';
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions, type LookupOptions } from 'node:dns';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { DELIVERY_HEADERS } from '../contracts/notifications.ts';
import { describeRefusal, literalHost, localNetworks, refusalOf, RULE_TEXT, type LocalNetwork, type Refusal } from '../webhook-targets.ts';

export interface Delivery {
  url: string;
  secret: string;
  eventType: string;
  idempotencyKey: string;
  body: string;
  /** An admin allowed this endpoint to reach loopback, private and the installer's own networks. */
  allowPrivateNetwork?: boolean;
}

export type SendOutcome =
  | { ok: true; status: number }
  /** `refused`: not sent at all, because the destination is one a webhook may not reach. */
  | { ok: false; status: number | null; error: string; refused?: true };

/** Resolves a host name to every address it has (as dns.lookup with `all: true`). */
export type Resolve = (hostname: string, cb: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;

const systemResolve: Resolve = (hostname, cb) => dnsLookup(hostname, { all: true }, cb);

/** The signed text: `<timestamp>.<raw body>`, so that neither can be changed nor replayed later under a fresh timestamp. */
export function signedPayload(timestamp: string, body: string): string {
  return `${timestamp}.${body}`;
}

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` (docs/notifications.md). */
export function signature(secret: string, timestamp: string, body: string): string {
  return `t=${timestamp},v1=${createHmac('sha256', secret).update(signedPayload(timestamp, body), 'utf8').digest('hex')}`;
}

class RefusedTarget extends Error {
  constructor(readonly refusal: Refusal, readonly host: string) {
    super(`refused: ${describeRefusal(refusal, host)}; ${RULE_TEXT}`);
  }
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * The `lookup` of the socket: resolves, refuses the whole name when any of its addresses is one a
 * webhook may not reach (unless allowed), and otherwise gives the socket exactly what it judged.
 */
export function guardedLookup(opts: { allowPrivateNetwork: boolean; resolve?: Resolve; local?: () => LocalNetwork[] }) {
  const resolve = opts.resolve ?? systemResolve;
  return (hostname: string, options: LookupOptions | LookupAllOptions, cb: LookupCallback): void => {
    resolve(hostname, (err, found) => {
      if (err) return cb(err, []);
      const family = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0;
      const addresses = family ? found.filter((a) => a.family === family) : found;
      if (addresses.length === 0) return cb(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
      if (!opts.allowPrivateNetwork) {
        const local = (opts.local ?? localNetworks)();
        for (const a of addresses) {
          const r = refusalOf(a.address, local);
          if (r) return cb(new RefusedTarget(r, hostname), []);
        }
      }
      if (options.all) cb(null, addresses);
      else cb(null, addresses[0]!.address, addresses[0]!.family);
    });
  };
}

export async function sendWebhook(
  d: Delivery,
  opts: { timeoutMs: number; now?: () => Date; resolve?: Resolve; local?: () => LocalNetwork[] },
): Promise<SendOutcome> {
  const timestamp = String(Math.floor((opts.now?.() ?? new Date()).getTime() / 1000));
  let url: URL;
  try {
    url = new URL(d.url);
  } catch {
    return { ok: false, status: null, error: 'not sent: the URL is not valid', refused: true };
  }
  const literal = literalHost(d.url);
  if (literal && !d.allowPrivateNetwork) {
    const r = refusalOf(literal, (opts.local ?? localNetworks)());
    if (r) return { ok: false, status: null, error: new RefusedTarget(r, literal).message, refused: true };
  }
  const body = Buffer.from(d.body, 'utf8');
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  try {
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = send(url, {
        method: 'POST',
        // A fresh connection per delivery: no socket judged for another request is reused.
        agent: false,
        lookup: guardedLookup({ allowPrivateNetwork: !!d.allowPrivateNetwork, ...(opts.resolve ? { resolve: opts.resolve } : {}), ...(opts.local ? { local: opts.local } : {}) }),
        signal: AbortSignal.timeout(opts.timeoutMs),
        headers: {
          'content-type': 'application/json',
          'content-length': String(body.length),
          'user-agent': 'installer-webhooks/1',
          [DELIVERY_HEADERS.event]: d.eventType,
          [DELIVERY_HEADERS.delivery]: d.idempotencyKey,
          [DELIVERY_HEADERS.signature]: signature(d.secret, timestamp, d.body),
          [DELIVERY_HEADERS.timestamp]: timestamp,
        },
      });
      req.once('response', resolve);
      req.once('error', reject);
      req.end(body);
    });
    // The answer's body is not needed: drop it and the connection.
    res.destroy();
    const status = res.statusCode ?? 0;
    if (status >= 200 && status < 300) return { ok: true, status };
    if (status >= 300 && status < 400) return { ok: false, status, error: `answered ${status} (a redirect, not followed) to ${res.headers.location ?? 'nowhere'}` };
    return { ok: false, status, error: `answered ${status}` };
  } catch (err) {
    if (err instanceof RefusedTarget) return { ok: false, status: null, error: err.message, refused: true };
    return { ok: false, status: null, error: describe(err, opts.timeoutMs) };
  }
}

function describe(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; message?: string; code?: string; cause?: { name?: string } };
  if (e.name === 'TimeoutError' || e.name === 'AbortError' || e.cause?.name === 'TimeoutError') return `no answer within ${timeoutMs} ms`;
  return e.message ?? String(err);
}
