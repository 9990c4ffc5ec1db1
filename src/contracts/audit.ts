// The audit trail's vocabulary: every kind of action it records (the job kinds, self-update, an
// admin's change to a webhook endpoint, and a change of the update policy) and the statuses of a row.
// Shared by the database schema, the API and the UI.

export const ACTION_KINDS = [
  'restart', 'stop', 'kill', 'pull', 'compose-up', 'deploy', 'apply-config', 'migrate-host', 'cancel-job', 'self-update', 'webhook', 'update-policy',
] as const;
export type ActionKind = (typeof ACTION_KINDS)[number];

export const ACTION_STATUSES = ['started', 'completed', 'failed'] as const;
export type ActionStatus = (typeof ACTION_STATUSES)[number];
