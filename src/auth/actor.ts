// Who did this: the identity written into audit rows and request rows. Every controller records
// the actor stored on the request it reconciles, which the API resolved with `actorOf`. The kind
// says who vouched for the id (docs/adr/0039-actor-kinds-and-config-reveal.md): a person the
// control plane forwards is recorded as `platform:<id>`, so it never reads as a local user (whose
// names have no colon) or as one of the installer's own actors.
import type { Role } from '../db/schema.ts';
import { FORWARDED_ACTOR_PREFIX, type ActorKind } from '../contracts/audit.ts';

export type { ActorKind } from '../contracts/audit.ts';

export type Principal =
  | { kind: 'user'; username: string; role: Role; mustChangePassword?: boolean }
  | { kind: 'service'; role: Role; forwardedUserId: string | null; forwardedEmail: string | null };

export interface Actor {
  id: string;
  email?: string | null;
  kind: ActorKind;
}

export function actorOf(principal: Principal, serviceActorName: string): Actor {
  if (principal.kind === 'user') return { id: principal.username, email: null, kind: 'user' };
  if (principal.forwardedUserId !== null) {
    return { id: `${FORWARDED_ACTOR_PREFIX}${principal.forwardedUserId}`, email: principal.forwardedEmail, kind: 'platform-user' };
  }
  return { id: serviceActorName, email: principal.forwardedEmail, kind: 'control-plane' };
}

/** The process itself (boot reconciliation, retention): not a person. */
export const SYSTEM_ACTOR: Actor = { id: 'installer', email: null, kind: 'system' };

/** The update policy starting a self-update on its own (docs/update-policy.md): not a person either. */
export const POLICY_ACTOR: Actor = { id: 'update-policy', email: null, kind: 'system' };

/**
 * An actor as the state layer writes it: the API and the installer always know the kind (Actor);
 * a request row written before kinds were recorded (or by an older build during a self-update)
 * has none, and its kind stays unknown (null) rather than guessed.
 */
export type RecordedActor = Omit<Actor, 'kind'> & { kind?: ActorKind | null };

const RANK: Record<Role, number> = { viewer: 1, operator: 2, admin: 3 };

export function hasRole(principal: Principal, needed: Role): boolean {
  return RANK[principal.role] >= RANK[needed];
}
