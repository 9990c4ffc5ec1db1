// Who did this: the identity written into audit rows and request rows. Every controller records
// the actor stored on the request it reconciles, which the API resolved with `actorOf`.
import type { Role } from '../db/schema.ts';

export type Principal =
  | { kind: 'user'; username: string; role: Role; mustChangePassword?: boolean }
  | { kind: 'service'; role: Role; forwardedUserId: string | null; forwardedEmail: string | null };

export interface Actor {
  id: string;
  email?: string | null;
}

export function actorOf(principal: Principal, serviceActorName: string): Actor {
  if (principal.kind === 'user') return { id: principal.username, email: null };
  return { id: principal.forwardedUserId ?? serviceActorName, email: principal.forwardedEmail };
}

/** The process itself (boot reconciliation, retention): not a person. */
export const SYSTEM_ACTOR: Actor = { id: 'installer', email: null };

/** The update policy starting a self-update on its own (docs/update-policy.md): not a person either. */
export const POLICY_ACTOR: Actor = { id: 'update-policy', email: null };

const RANK: Record<Role, number> = { viewer: 1, operator: 2, admin: 3 };

export function hasRole(principal: Principal, needed: Role): boolean {
  return RANK[principal.role] >= RANK[needed];
}
