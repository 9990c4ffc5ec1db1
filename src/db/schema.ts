// Table types for Kysely. Column names are snake_case in SQL and the same here.
import type { JobKind } from '../contracts/job-kinds.ts';
import type { Condition } from '../contracts/conditions.ts';
import type { ColumnType, Generated, Insertable, Selectable, Updateable } from 'kysely';

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type Json<T> = ColumnType<T, T | string, T | string>;

export type Role = 'viewer' | 'operator' | 'admin';
export const ROLES: readonly Role[] = ['viewer', 'operator', 'admin'];

export interface UsersTable {
  id: Generated<number>;
  username: string;
  password_hash: string;
  role: Role;
  created_at: Timestamp;
  updated_at: Timestamp;
  /** Set while the user is disabled: sign-in and its tokens are refused. */
  disabled_at: Date | null;
  /** The user must choose a new password before doing anything else (set by an admin, or generated). */
  must_change_password: Generated<boolean>;
  /** Named by every sign-in token as `gen`; bumped when the password, role or status changes. */
  token_generation: Generated<number>;
}

/** Sign-in attempts per key (client, user name, device, session) in a one-minute window that starts at the first. */
export interface SignInCountersTable {
  key: string;
  window_start: Timestamp;
  attempts: number;
}

/** Signed-out tokens (by `jti`), refused until they expire; pruned after. */
export interface RevokedTokensTable {
  jti: string;
  user_id: number;
  expires_at: Timestamp;
  revoked_at: Generated<Date>;
}

export { ACTION_KINDS, type ActionKind, type ActionStatus } from '../contracts/audit.ts';
import type { ActionKind, ActionStatus, ActorKind } from '../contracts/audit.ts';

export interface DeploymentActionsTable {
  id: Generated<string>; // bigserial comes back as a string from pg
  kind: ActionKind;
  status: ActionStatus;
  exit_code: number | null;
  actor: string;
  actor_email: string | null;
  /** Who vouched for `actor` (migration 0014); null on rows written before it. */
  actor_kind: ActorKind | null;
  detail: string | null;
  target_digest: string | null;
  schema_migration: string | null;
  job_id: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
  finished_at: Date | null;
}

/** Desired state: what someone asked a job to do. */
export interface DeploymentJobsTable {
  job_id: string;
  kind: JobKind;
  params: Json<Record<string, unknown>>;
  actor: string;
  actor_email: string | null;
  /** Who vouched for `actor` (migration 0014); null on requests written before it. */
  actor_kind: ActorKind | null;
  /** 1 when written, bumped by each change of the request (a cancel); the status row's `observed_generation` follows it. */
  generation: Generated<number>;
  cancel_requested_by: string | null;
  cancel_requested_at: Date | null;
  created_at: Timestamp;
}

export type JobPhase = 'queued' | 'running' | 'completed' | 'failed';

/** Observed state: what the jobs controller saw and did. */
export interface DeploymentJobStatusTable {
  job_id: string;
  phase: JobPhase;
  /** Read through `conditionsOf`: rows written before migration 0022 name the time `at`. */
  conditions: Json<Condition[]>;
  /** The request's generation the jobs controller last acted on (migration 0022); null until it looked. */
  observed_generation: number | null;
  snapshot: Json<unknown> | null;
  chart_version: string | null;
  claimed_by: string | null;
  started_at: Date | null;
  finished_at: Date | null;
  exit_code: number | null;
  detail: string | null;
  last_output_at: Date | null;
  hung_deadline: Date | null;
  /** Process group of the compose run, so a restarted backend can stop an orphan. */
  runner_pid: number | null;
  next_seq: Generated<number>;
  updated_at: Timestamp;
}

export interface DeploymentJobEventsTable {
  job_id: string;
  seq: number;
  type: string;
  payload: Json<Record<string, unknown>>;
  at: Timestamp;
}

export interface PlatformConfigChangesTable {
  key: string;
  value_encrypted: string | null;
  remove: Generated<boolean>;
  updated_by: string;
  updated_at: Timestamp;
}

export interface InstallerSettingsTable {
  key: string;
  value: Json<unknown>;
  updated_by: string | null;
  updated_at: Timestamp;
}

export const SELF_UPDATE_PHASES = [
  'requested', 'preflight', 'newest', 'unresolved', 'aborted', 'helper-running', 'completed', 'rolled-back', 'neither', 'undecided',
] as const;
export type SelfUpdatePhase = (typeof SELF_UPDATE_PHASES)[number];

/** Desired state: someone asked the installer to update itself to its channel's newest build. */
export interface SelfUpdateRequestsTable {
  request_id: string;
  actor: string;
  actor_email: string | null;
  /** Who vouched for `actor` (migration 0014); null on requests written before it. */
  actor_kind: ActorKind | null;
  /** The update's own job (kind `self-update`): its transcript. Null for requests made before it existed. */
  job_id: string | null;
  /** The digest the update policy decided on (migration 0019); preflight installs only it. Null for a start by hand. */
  decided_digest: string | null;
  created_at: Timestamp;
}

/** Observed state of a self-update: preflight, the helper, and the outcome reconciled on boot. */
export interface SelfUpdateStatusTable {
  request_id: string;
  phase: SelfUpdatePhase;
  /** The runtime's `Reconciled` condition; read through `conditionsOf`. */
  conditions: Json<Condition[]>;
  snapshot: Json<unknown> | null;
  chart_version: string | null;
  claimed_by: string | null;
  channel: string | null;
  target_tag: string | null;
  target_digest: string | null;
  target_image_id: string | null;
  previous_reference: string | null;
  previous_digest: string | null;
  previous_image_id: string | null;
  pre_update_migration: string | null;
  /** The database backup preflight took (migration 0012). */
  backup_file: string | null;
  /** The sha256 of the compose file preflight staged; the helper checks the staged file against it (migration 0015). */
  staged_compose_sha256: string | null;
  action_id: string | null;
  helper_container_id: string | null;
  helper_deadline: Date | null;
  helper_exit_code: number | null;
  /** While in preflight: when the watchdog aborts it, moved at each step (migration 0020). */
  hung_deadline: Date | null;
  /** Why preflight aborted, for the API's answer: `conflict` (409) or `preflight`. */
  abort_code: string | null;
  detail: string | null;
  created_at: Timestamp;
  updated_at: Timestamp;
  finished_at: Date | null;
  /** When the backend that ran before the switch sent its last answer (written as it stops). */
  last_answer_at: Date | null;
  /** When the first backend after the switch listened. */
  first_ready_at: Date | null;
  /** first_ready_at − last_answer_at, stored by the outcome reconciliation; null when either end is unknown. */
  downtime_ms: number | null;
  /** Why downtime_ms is null. */
  downtime_note: string | null;
  /** When the boot found this update taken back by a restore of its preflight's backup and re-derived its outcome (migration 0019). */
  restored_at: Date | null;
}

/** Observed state: one run of the self-update outcome's reconciliation, with its chart snapshot. */
export interface ReconcileRunsTable {
  run_id: string;
  /** The self-update it reconciles, once it found one. */
  request_id: string | null;
  worker: string;
  snapshot: Json<unknown> | null;
  chart_version: string;
  started_at: Generated<Date>;
  updated_at: Generated<Date>;
  finished_at: Date | null;
}

export const UPDATE_POLICY_MODES = ['manual', 'notify', 'auto'] as const;
export type UpdatePolicyMode = (typeof UPDATE_POLICY_MODES)[number];

/** Desired state: how the installer updates itself (one row, id 1), and the policy reconciler's status. */
export interface UpdatePolicyTable {
  id: Generated<number>;
  mode: UpdatePolicyMode;
  /** Days the window opens on, 0 = Sunday … 6 = Saturday (UTC). */
  window_days: Json<number[]>;
  window_start_hour: number;
  window_end_hour: number;
  generation: Generated<number>;
  updated_by: string | null;
  updated_at: Timestamp;
  observed_generation: Generated<number>;
  decision: string | null;
  decision_detail: string | null;
  decided_at: Date | null;
  available_digest: string | null;
  available_since: Date | null;
  last_attempt_digest: string | null;
  last_attempt_at: Date | null;
  last_attempt_request_id: string | null;
}

/** Builds whose update rolled back or failed: never started automatically again until lifted. */
export interface UpdateQuarantineTable {
  digest: string;
  outcome: string;
  detail: string | null;
  request_id: string | null;
  since: Timestamp;
  lifted_at: Date | null;
  lifted_by: string | null;
}

/** A platform service a stop or kill on a Swarm scaled to zero: what the next start restores (docs/adr/0056-platform-on-a-swarm.md). */
export interface PlatformStoppedServicesTable {
  stack: string;
  service: string;
  /** Its replica count before the stop; null for a global service. */
  replicas: number | null;
  job_id: string;
  stopped_at: Generated<Timestamp>;
}

/** Observed state: one row per observed thing, written only by the observer (docs/adr/0023-observed-state.md). */
export interface ObservedStateTable {
  key: string;
  data: Json<unknown>;
  conditions: ColumnType<Condition[], Condition[] | string | undefined, Condition[] | string>;
  /** When the observation that wrote the row began (database clock); null until the first one. */
  observed_at: Date | null;
  /** Bumped by a reader that wants a fresh observation (bigint: a string from pg). */
  requested_generation: ColumnType<string, string | number | undefined, string | number>;
  /** The requested generation the last observation served. */
  observed_generation: ColumnType<string, string | number | undefined, string | number>;
  refresh_requested_at: Date | null;
}

/** An admin's webhook endpoint (docs/notifications.md); the secret is sealed with the encryption key. */
export interface WebhookEndpointsTable {
  id: string;
  url: string;
  secret_sealed: string;
  enabled: Generated<boolean>;
  /** An admin let it reach loopback, private and the installer's own networks (migration 0016). */
  allow_private_network: Generated<boolean>;
  created_by: string;
  created_at: Generated<Date>;
  updated_at: Generated<Date>;
}

/** One event owed to one endpoint: written with the change that caused it, delivered by the notifications reconciler. */
export interface NotificationOutboxTable {
  id: Generated<string>; // bigserial comes back as a string from pg
  endpoint_id: string;
  event_id: string;
  idempotency_key: string;
  event_type: string;
  body: string;
  attempts: Generated<number>;
  next_attempt_at: Generated<Date>;
  last_attempt_at: Date | null;
  last_status: number | null;
  last_error: string | null;
  delivered_at: Date | null;
  failed_at: Date | null;
  created_at: Generated<Date>;
}

export interface DB {
  webhook_endpoints: WebhookEndpointsTable;
  notification_outbox: NotificationOutboxTable;
  observed_state: ObservedStateTable;
  users: UsersTable;
  sign_in_counters: SignInCountersTable;
  revoked_tokens: RevokedTokensTable;
  deployment_actions: DeploymentActionsTable;
  deployment_jobs: DeploymentJobsTable;
  deployment_job_status: DeploymentJobStatusTable;
  deployment_job_events: DeploymentJobEventsTable;
  platform_config_changes: PlatformConfigChangesTable;
  installer_settings: InstallerSettingsTable;
  self_update_requests: SelfUpdateRequestsTable;
  self_update_status: SelfUpdateStatusTable;
  reconcile_runs: ReconcileRunsTable;
  update_policy: UpdatePolicyTable;
  update_quarantine: UpdateQuarantineTable;
  platform_stopped_services: PlatformStoppedServicesTable;
}

export type User = Selectable<UsersTable>;
export type NewUser = Insertable<UsersTable>;
export type DeploymentAction = Selectable<DeploymentActionsTable>;
export type NewDeploymentAction = Insertable<DeploymentActionsTable>;
export type DeploymentActionUpdate = Updateable<DeploymentActionsTable>;
export type JobEvent = Selectable<DeploymentJobEventsTable>;
