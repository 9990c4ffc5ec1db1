// The preflight report's facts from the state that holds them (docs/adr/0054-preflight-report.md):
// an observation of the channel (with what the observer gathered for the report), the engine's
// observed facts, the quarantine and the update policy. The API answers the report from them, and
// the self-update's preflight refuses a start the report blocks.
import type { Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';
import { preflightChecks, type PreflightFacts, type ReportCheck } from '../contracts/preflight-report.ts';
import { readObserved, type ObservedRow } from './observed.ts';
import { activeQuarantine, getUpdatePolicy } from './update-policy.ts';

/** The report's facts for the channel observation `channel` (its row as read or just observed). */
export async function preflightFacts(db: Kysely<DB>, channel: ObservedRow<'channel'>): Promise<PreflightFacts | null> {
  const c = channel.data;
  if (!c) return null;
  const p = c.preflight;
  const [engineRow, policy, quarantined] = await Promise.all([
    readObserved(db, 'engine'),
    getUpdatePolicy(db),
    c.remoteDigest ? activeQuarantine(db, c.remoteDigest) : Promise.resolve(undefined),
  ]);
  const ef = engineRow?.data?.facts as { version?: unknown; apiVersion?: unknown; compose?: unknown } | null | undefined;
  return {
    channel: c.channel,
    current: { digest: c.currentDigest, version: p?.currentVersion ?? null },
    targetDigest: c.remoteDigest,
    target: p?.target ?? null,
    targetError: p ? p.targetError : 'the observation holds no report (written by an older build)',
    signature: c.signature ?? null,
    compose: { changed: c.composeChanged, diff: p?.composeDiff ?? null, error: c.errors.filter((e) => e.includes('compose')).join('; ') || null },
    engine:
      typeof ef?.version === 'string' && typeof ef.apiVersion === 'string'
        ? { version: ef.version, apiVersion: ef.apiVersion, compose: typeof ef.compose === 'string' ? ef.compose : null }
        : { error: engineRow?.data?.error ?? 'not observed yet' },
    disk: p?.disk ?? { error: 'not observed yet' },
    quarantine: quarantined ? { reason: quarantined.outcome, at: quarantined.since.toISOString() } : null,
    policy: { mode: policy.mode, decision: policy.status.decision, detail: policy.status.detail },
  };
}

/**
 * What blocks an update to `digest` in the last observation of the channel (when that observed the
 * same build): the checks at `block`, but those `except` names (preflight checks them itself, live).
 */
export async function reportBlocks(db: Kysely<DB>, digest: string, except: readonly ReportCheck['id'][]): Promise<ReportCheck[]> {
  const row = await readObserved(db, 'channel');
  if (!row || row.data?.remoteDigest !== digest) return [];
  const facts = await preflightFacts(db, row);
  return facts ? preflightChecks(facts).filter((c) => c.level === 'block' && !except.includes(c.id)) : [];
}
