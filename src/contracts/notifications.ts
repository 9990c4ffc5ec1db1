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
