// The update policy (desired state, one row written by the API) with its status (written by the
// policy reconciler), and the quarantine of builds whose update rolled back or failed
// (docs/update-policy.md). A change of the policy is audited in the transaction that makes it: the
// change is the whole action, there is no controller work to wait for.
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB, UpdatePolicyMode } from '../db/schema.ts';
import type { RecordedActor } from '../auth/actor.ts';
import { recordFinished, recordStarted } from './actions.ts';

type Conn = Kysely<DB> | Transaction<DB>;

/** Wakes the policy reconciler: the policy changed, or a quarantine was written or lifted. */
export const UPDATE_POLICY_CHANNEL = 'update_policy';
/**
 * NOTIFY with the digest as payload when the policy first sees a new build it may announce (modes
 * `notify` and `auto`): the hook for whatever tells people (a webhook, a mail). Also on the row.
 */
export const UPDATE_AVAILABLE_CHANNEL = 'update_available';

export const DAY_NAMES = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;
export type DayName = (typeof DAY_NAMES)[number];

export interface PolicyWindowView {
  /** Days the window opens on, in week order from Sunday. */
  days: DayName[];
  startHour: number;
  endHour: number;
}

export interface UpdatePolicySpec {
  mode: UpdatePolicyMode;
  window: PolicyWindowView;
}

export interface UpdatePolicyView extends UpdatePolicySpec {
  generation: number;
  updatedBy: string | null;
  updatedAt: Date;
  status: {
    observedGeneration: number;
    decision: string | null;
    detail: string | null;
    decidedAt: Date | null;
    availableDigest: string | null;
    availableSince: Date | null;
    lastAttempt: { digest: string; at: Date; requestId: string | null } | null;
  };
}

const date = (d: Date | string | null) => (d === null ? null : new Date(d));
const dayNames = (days: readonly number[]) => [...new Set(days)].sort((a, b) => a - b).map((d) => DAY_NAMES[d]!).filter(Boolean);
export const dayNumbers = (days: readonly DayName[]) => [...new Set(days.map((d) => DAY_NAMES.indexOf(d)))].sort((a, b) => a - b);

export async function getUpdatePolicy(db: Conn): Promise<UpdatePolicyView> {
  const r = await db.selectFrom('update_policy').selectAll().where('id', '=', 1).executeTakeFirstOrThrow();
  return {
    mode: r.mode,
    window: { days: dayNames(r.window_days as number[]), startHour: r.window_start_hour, endHour: r.window_end_hour },
    generation: Number(r.generation),
    updatedBy: r.updated_by,
    updatedAt: new Date(r.updated_at),
    status: {
      observedGeneration: Number(r.observed_generation),
      decision: r.decision,
      detail: r.decision_detail,
      decidedAt: date(r.decided_at),
      availableDigest: r.available_digest,
      availableSince: date(r.available_since),
      lastAttempt: r.last_attempt_digest && r.last_attempt_at ? { digest: r.last_attempt_digest, at: new Date(r.last_attempt_at), requestId: r.last_attempt_request_id } : null,
    },
  };
}

const hh = (h: number) => `${String(h).padStart(2, '0')}:00`;
export const describePolicy = (p: UpdatePolicySpec) =>
  p.mode === 'auto' ? `auto, ${p.window.days.join(',')} ${hh(p.window.startHour)}-${hh(p.window.endHour)} UTC` : p.mode;

/**
 * Replaces the policy (a new generation), records the change in the audit trail and wakes the
 * policy reconciler, in one transaction. Returns the policy as stored.
 */
export async function putUpdatePolicy(db: Kysely<DB>, wanted: UpdatePolicySpec, actor: RecordedActor): Promise<UpdatePolicyView> {
  const spec: UpdatePolicySpec = { ...wanted, window: { ...wanted.window, days: dayNames(dayNumbers(wanted.window.days)) } };
  await db.transaction().execute(async (tx) => {
    const before = await getUpdatePolicy(tx);
    await tx
      .updateTable('update_policy')
      .set({
        mode: spec.mode,
        window_days: JSON.stringify(dayNumbers(spec.window.days)),
        window_start_hour: spec.window.startHour,
        window_end_hour: spec.window.endHour,
        generation: sql`generation + 1`,
        updated_by: actor.id,
        updated_at: new Date(),
      })
      .where('id', '=', 1)
      .execute();
    const action = await recordStarted(tx, { kind: 'update-policy', actor, detail: `update policy: ${describePolicy(spec)} (was ${describePolicy(before)})` });
    await recordFinished(tx, String(action.id), { status: 'completed', exitCode: null });
    await sql`select pg_notify(${UPDATE_POLICY_CHANNEL}, 'policy')`.execute(tx);
  });
  return getUpdatePolicy(db);
}

/** Written by the policy reconciler: what it decided at the generation it read. */
export async function recordPolicyDecision(db: Conn, d: { generation: number; decision: string; detail: string }): Promise<void> {
  await db
    .updateTable('update_policy')
    .set({ observed_generation: sql`greatest(observed_generation, ${d.generation})`, decision: d.decision, decision_detail: d.detail, decided_at: new Date() })
    .where('id', '=', 1)
    .execute();
}

/**
 * Records that `digest` is available (once per digest) and sends UPDATE_AVAILABLE_CHANNEL. True
 * when it was new, i.e. when whoever tells people should tell them now.
 */
export async function markUpdateAvailable(db: Kysely<DB>, digest: string): Promise<boolean> {
  return db.transaction().execute(async (tx) => {
    const res = await tx
      .updateTable('update_policy')
      .set({ available_digest: digest, available_since: new Date() })
      .where('id', '=', 1)
      .where((eb) => eb.or([eb('available_digest', 'is', null), eb('available_digest', '!=', digest)]))
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) === 0) return false;
    await sql`select pg_notify(${UPDATE_AVAILABLE_CHANNEL}, ${digest})`.execute(tx);
    return true;
  });
}

/** Forgets the announced digest (the installer runs it, or it was quarantined). */
export async function clearUpdateAvailable(db: Conn): Promise<void> {
  await db.updateTable('update_policy').set({ available_digest: null, available_since: null }).where('id', '=', 1).where('available_digest', 'is not', null).execute();
}

/** Written by the policy reconciler when it has written a self-update request. */
export async function recordPolicyAttempt(db: Conn, digest: string, requestId: string): Promise<void> {
  await db.updateTable('update_policy').set({ last_attempt_digest: digest, last_attempt_at: new Date(), last_attempt_request_id: requestId }).where('id', '=', 1).execute();
}

export interface QuarantineView {
  digest: string;
  outcome: string;
  detail: string | null;
  requestId: string | null;
  since: Date;
  liftedAt: Date | null;
  liftedBy: string | null;
}

/** The quarantine, newest first; lifted entries only when asked for. */
export async function listQuarantine(db: Conn, opts: { includeLifted?: boolean } = {}): Promise<QuarantineView[]> {
  let q = db.selectFrom('update_quarantine').selectAll().orderBy('since', 'desc');
  if (!opts.includeLifted) q = q.where('lifted_at', 'is', null);
  return (await q.execute()).map((r) => ({
    digest: r.digest, outcome: r.outcome, detail: r.detail, requestId: r.request_id, since: new Date(r.since), liftedAt: date(r.lifted_at), liftedBy: r.lifted_by,
  }));
}

/** Digests no policy may start: quarantined and not lifted. */
export async function quarantinedDigests(db: Conn): Promise<string[]> {
  return (await db.selectFrom('update_quarantine').select('digest').where('lifted_at', 'is', null).execute()).map((r) => r.digest);
}

/** The quarantine of `digest`, when it is quarantined and nobody lifted it. */
export async function activeQuarantine(db: Conn, digest: string): Promise<QuarantineView | undefined> {
  const r = await db.selectFrom('update_quarantine').selectAll().where('digest', '=', digest).where('lifted_at', 'is', null).executeTakeFirst();
  return r ? { digest: r.digest, outcome: r.outcome, detail: r.detail, requestId: r.request_id, since: new Date(r.since), liftedAt: null, liftedBy: null } : undefined;
}

/**
 * Quarantines `digest` after its update ended `outcome` (rolled-back, neither, undecided): the policy
 * never starts it again. A digest quarantined before (and lifted) is quarantined again.
 */
export async function quarantineDigest(db: Conn, q: { digest: string; outcome: string; detail: string | null; requestId: string }): Promise<void> {
  const now = new Date();
  await db
    .insertInto('update_quarantine')
    .values({ digest: q.digest, outcome: q.outcome, detail: q.detail, request_id: q.requestId, since: now })
    .onConflict((oc) => oc.column('digest').doUpdateSet({ outcome: q.outcome, detail: q.detail, request_id: q.requestId, since: now, lifted_at: null, lifted_by: null }))
    .execute();
  await sql`select pg_notify(${UPDATE_POLICY_CHANNEL}, 'quarantine')`.execute(db);
}

/** Lifts the quarantine of `digest` (a person started it by hand). True when it was quarantined. */
export async function liftQuarantine(db: Conn, digest: string, by: RecordedActor): Promise<boolean> {
  const res = await db
    .updateTable('update_quarantine')
    .set({ lifted_at: new Date(), lifted_by: by.id })
    .where('digest', '=', digest)
    .where('lifted_at', 'is', null)
    .executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}
