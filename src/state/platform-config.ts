// Desired platform configuration: .env keys an operator set or removed, waiting for the next
// apply-config or deploy to write them into the platform's .env. Values are encrypted at rest
// with the installer's encryption key (AES-256-GCM).
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import type { DB } from '../db/schema.ts';
import type { Actor } from '../auth/actor.ts';
import { recordCompleted } from './actions.ts';

type Conn = Kysely<DB> | Transaction<DB>;

export class Sealer {
  private readonly key: Buffer;
  constructor(encryptionKey: string) {
    this.key = createHash('sha256').update(encryptionKey).digest();
  }
  seal(plain: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return ['v1', iv.toString('base64url'), c.getAuthTag().toString('base64url'), body.toString('base64url')].join('.');
  }
  open(sealed: string): string {
    const [v, iv, tag, body] = sealed.split('.');
    if (v !== 'v1' || !iv || !tag || body === undefined) throw new Error('unknown sealed value format');
    const d = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
    d.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([d.update(Buffer.from(body, 'base64url')), d.final()]).toString('utf8');
  }
}

export interface ConfigChange {
  key: string;
  /** The new value; null when the key is to be removed. */
  value: string | null;
  updatedBy: string;
  updatedAt: Date;
  /** The stored form, which identifies this version of the change (a fresh IV each time). */
  sealed: string | null;
}

export async function putConfigChanges(db: Conn, sealer: Sealer, set: Record<string, string>, remove: readonly string[], by: string): Promise<void> {
  const rows = [
    ...Object.entries(set).map(([key, value]) => ({ key, value_encrypted: sealer.seal(value), remove: false, updated_by: by })),
    ...remove.map((key) => ({ key, value_encrypted: null, remove: true, updated_by: by })),
  ];
  if (!rows.length) return;
  await db
    .insertInto('platform_config_changes')
    .values(rows)
    .onConflict((oc) =>
      oc.column('key').doUpdateSet((eb) => ({
        value_encrypted: eb.ref('excluded.value_encrypted'),
        remove: eb.ref('excluded.remove'),
        updated_by: eb.ref('excluded.updated_by'),
        updated_at: new Date(),
      })),
    )
    .execute();
}

export async function pendingConfigChanges(db: Conn, sealer: Sealer): Promise<ConfigChange[]> {
  const rows = await db.selectFrom('platform_config_changes').selectAll().orderBy('key').execute();
  return rows.map((r) => ({
    key: r.key,
    value: r.remove || r.value_encrypted === null ? null : sealer.open(r.value_encrypted),
    updatedBy: r.updated_by,
    updatedAt: new Date(r.updated_at),
    sealed: r.value_encrypted,
  }));
}

/** Removes the changes that were applied, unless they were changed again meanwhile. */
export async function clearConfigChanges(db: Conn, applied: readonly ConfigChange[]): Promise<void> {
  for (const c of applied) {
    // A removal has no sealed value; one set after it has, so the key alone is not enough.
    let q = db.deleteFrom('platform_config_changes').where('key', '=', c.key);
    q = c.sealed === null ? q.where('remove', '=', true) : q.where('value_encrypted', '=', c.sealed);
    await q.execute();
  }
}

/**
 * An admin saw one value of the platform's configuration: an audit row (`config-reveal`) naming the
 * key and whether the value was a pending change, never the value.
 */
export async function recordConfigReveal(db: Conn, key: string, pending: boolean, actor: Actor): Promise<void> {
  await recordCompleted(db, { kind: 'config-reveal', actor, detail: `revealed the value of ${key}${pending ? ' (a pending change)' : ''}` });
}
