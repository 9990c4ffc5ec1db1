// The audit trail's vocabulary: every kind of action it records (the job kinds, self-update, an
// admin's change to a webhook endpoint, a change of the update policy, and an admin revealing a
// value of the platform's configuration), the statuses of a row, and the kinds of actor.
// Shared by the database schema, the API and the UI.

export const ACTION_KINDS = [
  'restart', 'stop', 'kill', 'pull', 'compose-up', 'deploy', 'apply-config', 'migrate-host', 'cancel-job', 'self-update', 'webhook', 'update-policy',
  'config-reveal',
] as const;
export type ActionKind = (typeof ACTION_KINDS)[number];

export const ACTION_STATUSES = ['started', 'completed', 'failed'] as const;
export type ActionStatus = (typeof ACTION_STATUSES)[number];

/**
 * Who vouched for an action (docs/adr/0039-actor-kinds-and-config-reveal.md):
 * - `user`: a local user, signed in with a password;
 * - `platform-user`: a person the control plane forwarded (`x-actor-user-id`), recorded as `platform:<id>`;
 * - `control-plane`: the control plane itself (the service token, no person forwarded);
 * - `system`: the installer on its own (boot reconciliation, the update policy, the command line).
 * Rows written before kinds were kept have none (null): who wrote them cannot be told apart now.
 */
export const ACTOR_KINDS = ['user', 'platform-user', 'control-plane', 'system'] as const;
export type ActorKind = (typeof ACTOR_KINDS)[number];

/** How a forwarded person's id is recorded: a local user name has no colon, and no system actor starts so. */
export const FORWARDED_ACTOR_PREFIX = 'platform:';
