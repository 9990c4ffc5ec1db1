// Display helpers.
import type { ActorKind } from '../../contracts/audit.ts';

/** Who vouched for an actor, as the audit page and the header say it (null: a row from before kinds were kept). */
export const ACTOR_KIND_LABEL: Record<ActorKind, { label: string; title: string }> = {
  user: { label: 'local user', title: 'A user of this installer, signed in with a password' },
  'platform-user': { label: 'via control plane', title: "A person the platform's control plane vouched for (its id as the control plane sent it, after platform:)" },
  'control-plane': { label: 'control plane', title: "The platform's control plane itself (the service token, no person named)" },
  system: { label: 'system', title: 'The installer on its own: boot reconciliation, the update policy, the command line' },
};
export function time(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  // UTC, as the installer's logs and containers keep it (TZ=UTC).
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

export function ago(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '';
  const s = Math.round((now - new Date(iso).getTime()) / 1000);
  if (s < -60) return 'in the future';
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function shortDigest(d: string | null | undefined): string {
  if (!d) return 'unknown';
  const m = /^sha256:([0-9a-f]{12})/.exec(d);
  return m ? `sha256:${m[1]}…` : d;
}

export function bytes(n: number | undefined): string {
  if (n === undefined) return '';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} kB`;
  if (n < 1024 * 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MB`;
  return `${(n / 1024 / 1024 / 1024).toFixed(2)} GB`;
}

export function duration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const m = Math.floor(s / 60);
  return m ? `${m} min ${String(s % 60).padStart(2, '0')} s` : `${s} s`;
}

/** A self-update's downtime: to the hundredth of a second under a minute, the figure the installer measured. */
export function downtime(ms: number): string {
  if (ms < 60_000) return `${(ms / 1000).toFixed(2)} s`;
  return duration(ms);
}
