// The outbound notifications' vocabulary (docs/notifications.md): the event types a webhook
// receives and the headers of a delivery. Shared by the state, the delivery reconciler, the API
// and the UI.

export const NOTIFICATION_EVENTS = [
  'job.failed',
  'self-update.completed',
  'self-update.rolled-back',
  'self-update.failed',
  'self-update.schema-alarm',
  'update.available',
  'test',
] as const;
export type NotificationEvent = (typeof NOTIFICATION_EVENTS)[number];

export const DELIVERY_HEADERS = {
  event: 'x-installer-event',
  delivery: 'x-installer-delivery',
  /** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">` (docs/notifications.md). */
  signature: 'x-installer-signature',
  timestamp: 'x-installer-timestamp',
} as const;

/** A delivery's state as the API reports it. */
export type DeliveryStatus = 'pending' | 'delivered' | 'failed';

/** The JSON body every delivery carries; `data` depends on `type`. */
export interface NotificationBody {
  /** The event, once: the same on every endpoint it goes to (`job.failed:<jobId>`, …). */
  id: string;
  type: NotificationEvent;
  /** When the installer recorded the event (ISO 8601, UTC). */
  occurredAt: string;
  data: Record<string, unknown>;
}

/** A webhook endpoint as the API answers it (never its secret). */
export interface WebhookJson {
  id: string;
  url: string;
  enabled: boolean;
  /** An admin let it reach loopback, link-local, private and the installer's own networks. */
  allowPrivateNetwork: boolean;
  createdBy: string;
  createdAt: string;
  updatedAt: string;
}

/** A delivery as the API answers it: the outbox row, times as ISO 8601 strings. */
export interface DeliveryJson {
  id: string;
  endpointId: string;
  endpointUrl: string;
  eventId: string;
  eventType: string;
  idempotencyKey: string;
  status: DeliveryStatus;
  attempts: number;
  nextAttemptAt: string | null;
  lastAttemptAt: string | null;
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: string | null;
  failedAt: string | null;
  createdAt: string;
}
