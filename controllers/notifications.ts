// Delivers the notification outbox to the admins' webhook endpoints (docs/notifications.md). On
// the shared claim loop: woken by NOTIFY when an event is queued, by a slow poll, and by a timer
// set to the next row that is due; each claim takes one due row with FOR UPDATE SKIP LOCKED and
// leases it, so two processes never send the same row at once and a killed one's row comes due
// again. An answer other than 2xx (or none) is retried with exponential backoff and jitter, up to
// a cap, until the row is older than the give-up age, when it is marked failed. A delivery the
// address rule refuses (docs/notifications.md: loopback, private, the installer's own networks,
// unless the endpoint allows them) is not a receiver's hiccup: it waits the longest delay at once,
// with its reason recorded, and goes out as soon as an admin changes the endpoint (or gives up).
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import type { Sealer } from '../src/state/platform-config.ts';
import { claimNextDelivery, markAttemptFailed, markDelivered, nextDeliveryInMs, urlForAudit, type ClaimedDelivery } from '../src/state/notifications.ts';
import { sendWebhook, type SendOutcome } from '../src/adapters/webhook-sender.ts';

export interface RetryPolicy {
  /** The first retry's delay; each later one doubles it. */
  baseMs: number;
  /** No delay is longer than this. */
  maxMs: number;
  /** A row older than this is marked failed after its next failed attempt. */
  giveUpMs: number;
}

export interface NotificationsDeps {
  db: Kysely<DB>;
  logger: Logger;
  sealer: Sealer;
  timeoutMs: number;
  retry: RetryPolicy;
  /**
   * The process's secret scrubber: a body leaves the machine, and a job's detail (say) may quote a
   * secret the job printed. Applied to the body before it is signed and sent.
   */
  scrub?: (text: string) => string;
  send?: (d: Parameters<typeof sendWebhook>[0], opts: { timeoutMs: number }) => Promise<SendOutcome>;
}

/**
 * The delay before attempt `attempts + 1`: base × 2^(attempts − 1), capped, with "equal jitter"
 * (between half and all of it) so that endpoints that failed together do not retry together.
 */
export function retryDelayMs(attempts: number, p: Pick<RetryPolicy, 'baseMs' | 'maxMs'>, random = Math.random): number {
  const exp = Math.min(p.maxMs, p.baseMs * 2 ** Math.min(Math.max(attempts - 1, 0), 30));
  return Math.round(exp / 2 + random() * (exp / 2));
}

export class NotificationsReconciler {
  private timer: NodeJS.Timeout | undefined;
  /** Set by whoever runs the loop: wakes it when the next delivery is due. */
  wake: () => void = () => {};

  constructor(private readonly d: NotificationsDeps) {}

  /**
   * How long a claimed row is held: well past the request's timeout, with a margin to record the
   * outcome. A process killed mid-send delays that row's retry by this much at most.
   */
  private get leaseMs(): number {
    return 2 * this.d.timeoutMs + 5_000;
  }

  async claim(): Promise<ClaimedDelivery | undefined> {
    const next = await claimNextDelivery(this.d.db, this.leaseMs);
    if (!next) await this.scheduleNext();
    return next;
  }

  /** Sends one claimed delivery and records the outcome on its row. */
  async reconcile(c: ClaimedDelivery): Promise<void> {
    const { db, logger } = this.d;
    let outcome: SendOutcome;
    try {
      const secret = this.d.sealer.open(c.secretSealed);
      const body = this.d.scrub ? this.d.scrub(c.body) : c.body;
      outcome = await (this.d.send ?? sendWebhook)({ url: c.url, allowPrivateNetwork: c.allowPrivateNetwork, secret, eventType: c.eventType, idempotencyKey: c.idempotencyKey, body }, { timeoutMs: this.d.timeoutMs });
    } catch (err) {
      outcome = { ok: false, status: null, error: `not sent: ${(err as Error).message}` };
    }
    const fields = { delivery: c.idempotencyKey, event: c.eventType, endpoint: urlForAudit(c.url), attempt: c.attempts };
    if (outcome.ok) {
      await markDelivered(db, c.id, outcome.status);
      logger.info({ ...fields, status: outcome.status }, 'webhook delivered');
      return;
    }
    // Refused by the address rule: only an admin's change of the endpoint (which makes it due at
    // once) or of the name's DNS can alter that, so no backoff ramp, no storm of attempts.
    const refused = 'refused' in outcome && outcome.refused === true;
    const retryInMs = refused ? this.d.retry.maxMs : retryDelayMs(c.attempts, this.d.retry);
    const gaveUp = await markAttemptFailed(db, c.id, { status: outcome.status, error: outcome.error, retryInMs, giveUpMs: this.d.retry.giveUpMs });
    if (gaveUp) logger.error({ ...fields, error: outcome.error }, 'webhook delivery failed for good: gave up retrying');
    else if (refused) logger.warn({ ...fields, error: outcome.error, retryInMs }, 'webhook delivery refused: the endpoint may not reach this address; waiting for an admin to change it');
    else logger.warn({ ...fields, error: outcome.error, retryInMs }, 'webhook delivery failed; retrying');
  }

  /** Nothing due now: wake the loop when the earliest owed row comes due (the poll is the backstop). */
  private async scheduleNext(): Promise<void> {
    const ms = await nextDeliveryInMs(this.d.db);
    clearTimeout(this.timer);
    if (ms === null) return;
    this.timer = setTimeout(() => this.wake(), Math.min(Math.max(ms + 5, 50), 2 ** 31 - 1));
    this.timer.unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.wake = () => {};
  }
}

