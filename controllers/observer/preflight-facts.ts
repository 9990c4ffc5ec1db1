// What the observer gathers beside the channel for the preflight report
// (docs/adr/0054-preflight-report.md): the running and the target build's declarations (version
// label, minimum engine API, the target's migrations this database has not applied), the compose
// file's diff, and the room for the pre-switch backup. Each fact that cannot be read says why.
import type { Kysely } from 'kysely';
import { createTwoFilesPatch } from 'diff';
import type { DB } from '../../src/db/schema.ts';
import { executedMigrations } from '../../src/db/migrate.ts';
import type { SelfUpdatePort } from '../../src/contracts/ports.ts';
import { ENGINE_MIN_LABEL, VERSION_LABEL, type ObservedPreflight, type PreflightFacts, type TargetBuildFacts } from '../../src/contracts/preflight-report.ts';

/** A diff longer than this is cut there, saying so: the report is read on a screen. */
export const MAX_DIFF_CHARS = 64 * 1024;

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** The unified diff from the installed file to the published one; null when they are the same. */
export function composeDiff(installed: string, published: string): string | null {
  if (installed === published) return null;
  const patch = createTwoFilesPatch('docker-compose.yml (installed)', 'docker-compose.yml (published)', installed, published, undefined, undefined, { context: 3 });
  return patch.length <= MAX_DIFF_CHARS ? patch : `${patch.slice(0, MAX_DIFF_CHARS)}\n… (cut at ${MAX_DIFF_CHARS} characters of ${patch.length})\n`;
}

export async function observePreflight(
  deps: { db: Kysely<DB>; port: SelfUpdatePort; repository: string },
  seen: { currentImageId: string | null; remoteDigest: string | null; installed: string | null; published: string | null },
): Promise<ObservedPreflight> {
  const { db, port, repository } = deps;
  const current = seen.currentImageId ? port.buildDeclaration(seen.currentImageId).catch(() => null) : Promise.resolve(null);
  const target = (async (): Promise<{ facts: TargetBuildFacts | null; error: string | null }> => {
    if (!seen.remoteDigest) return { facts: null, error: "the channel's newest build is not known" };
    try {
      const declared = await port.buildDeclaration(`${repository}@${seen.remoteDigest}`);
      if (!declared) return { facts: null, error: 'the target build is not local yet: the update check pulls it in the background' };
      const applied = new Set(await executedMigrations(db));
      return {
        facts: {
          version: declared.labels[VERSION_LABEL] ?? null,
          engineApiMin: declared.labels[ENGINE_MIN_LABEL] ?? null,
          pendingMigrations: declared.migrations.filter((m) => !applied.has(m.name)).map((m) => ({ name: m.name, step: m.contract ? 'contract' : 'expand' })),
        },
        error: null,
      };
    } catch (err) {
      return { facts: null, error: `the target build could not be read: ${message(err)}` };
    }
  })();
  const disk = port.backupRoom().then(
    (room): PreflightFacts['disk'] =>
      room.estimate
        ? { free: room.free, estimate: room.estimate.bytes, basis: room.estimate.basis }
        : { free: room.free, estimate: null, basis: 'its size is known once the first backup is taken' },
    (err: unknown): PreflightFacts['disk'] => ({ error: message(err) }),
  );
  const [declaredCurrent, t, room] = await Promise.all([current, target, disk]);
  return {
    currentVersion: declaredCurrent?.labels[VERSION_LABEL] ?? null,
    target: t.facts,
    targetError: t.error,
    composeDiff: seen.installed !== null && seen.published !== null ? composeDiff(seen.installed, seen.published) : null,
    disk: room,
  };
}
