// Sends one webhook delivery (docs/notifications.md): a POST of the stored JSON body, signed with
// the endpoint's secret (HMAC-SHA256 of the raw body), with a per-request timeout and no
// redirects followed (a 3xx is an answer that is not a success). It never throws: the outcome
// says what happened, for the delivery reconciler to record. It logs nothing (the secret is
// in its hands).
import { createHmac } from 'node:crypto';
import { DELIVERY_HEADERS } from '../contracts/notifications.ts';

export interface Delivery {
  url: string;
  secret: string;
  eventType: string;
  idempotencyKey: string;
  body: string;
}

export type SendOutcome = { ok: true; status: number } | { ok: false; status: number | null; error: string };

export function signature(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body, 'utf8').digest('hex')}`;
}

export async function sendWebhook(d: Delivery, opts: { timeoutMs: number; now?: () => Date }): Promise<SendOutcome> {
  const timestamp = String(Math.floor((opts.now?.() ?? new Date()).getTime() / 1000));
  let res: Response;
  try {
    res = await fetch(d.url, {
      method: 'POST',
      redirect: 'manual',
      signal: AbortSignal.timeout(opts.timeoutMs),
      headers: {
        'content-type': 'application/json',
        'user-agent': 'installer-webhooks/1',
        [DELIVERY_HEADERS.event]: d.eventType,
        [DELIVERY_HEADERS.delivery]: d.idempotencyKey,
        [DELIVERY_HEADERS.signature]: signature(d.secret, d.body),
        [DELIVERY_HEADERS.timestamp]: timestamp,
      },
      body: d.body,
    });
  } catch (err) {
    return { ok: false, status: null, error: describe(err, opts.timeoutMs) };
  }
  // The answer's body is not needed: drop it so the connection is freed.
  await res.body?.cancel().catch(() => {});
  if (res.status >= 200 && res.status < 300) return { ok: true, status: res.status };
  if (res.status >= 300 && res.status < 400) return { ok: false, status: res.status, error: `answered ${res.status} (a redirect, not followed) to ${res.headers.get('location') ?? 'nowhere'}` };
  return { ok: false, status: res.status, error: `answered ${res.status}` };
}

function describe(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e.name === 'TimeoutError' || e.name === 'AbortError') return `no answer within ${timeoutMs} ms`;
  const cause = e.cause?.code ?? e.cause?.message;
  return cause ? `${e.message ?? 'request failed'}: ${cause}` : (e.message ?? String(err));
}
