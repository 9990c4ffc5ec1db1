// What a stop or kill of the platform on a Swarm put aside, kept as desired state until the next
// start restores it (docs/adr/0056-platform-on-a-swarm.md): a replicated service's replica count
// before it was scaled to zero, or null for a global service held off every node.
import type { Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';

export interface StoppedService {
  service: string;
  replicas: number | null;
}

/**
 * Records the services a stop is about to scale to zero. A service already recorded keeps its
 * first count: a second stop (or a kill after a stop) finds it at zero, and zero is not what the
 * next start should restore.
 */
export async function recordStopped(db: Kysely<DB>, stack: string, jobId: string, services: StoppedService[]): Promise<void> {
  if (!services.length) return;
  await db
    .insertInto('platform_stopped_services')
    .values(services.map((s) => ({ stack, service: s.service, replicas: s.replicas, job_id: jobId })))
    .onConflict((oc) => oc.columns(['stack', 'service']).doNothing())
    .execute();
}

/** The stack's stopped services, by service name. */
export async function stoppedServices(db: Kysely<DB>, stack: string): Promise<Map<string, StoppedService>> {
  const rows = await db.selectFrom('platform_stopped_services').select(['service', 'replicas']).where('stack', '=', stack).execute();
  return new Map(rows.map((r) => [r.service, r]));
}

/** Forgets the stopped services a start has restored (all of the stack's when `services` is null). */
export async function clearStopped(db: Kysely<DB>, stack: string, services: readonly string[] | null): Promise<void> {
  let q = db.deleteFrom('platform_stopped_services').where('stack', '=', stack);
  if (services) {
    if (!services.length) return;
    q = q.where('service', 'in', services);
  }
  await q.execute();
}
