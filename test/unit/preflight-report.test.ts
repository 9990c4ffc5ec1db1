// The preflight report's checks (docs/adr/0054-preflight-report.md): each fact read as pass, warn or
// block with its sentence; the compose diff and the contract mark the observer reads.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { preflightChecks, type PreflightFacts, type ReportCheckId } from '../../src/contracts/preflight-report.ts';
import { composeDiff, MAX_DIFF_CHARS } from '../../controllers/observer/preflight-facts.ts';
import { isContractStep } from '../../src/adapters/build-facts.ts';
import { recentReading } from '../../src/adapters/database-backup.ts';

const OLD = `sha256:${'a'.repeat(64)}`;
const NEW = `sha256:${'b'.repeat(64)}`;
const MiB = 1024 * 1024;

/** An update every check passes. */
const good = (): PreflightFacts => ({
  channel: 'prod',
  current: { digest: OLD, version: '1.0.0' },
  targetDigest: NEW,
  target: { version: '1.1.0', engineApiMin: '1.41', pendingMigrations: [{ name: '0024_more', step: 'expand' }] },
  targetError: null,
  signature: { policy: 'require', verdict: { result: 'verified', detail: 'the build sha256:bbbbbbbbbbbb… is signed by cosign.pub (0123456789abcdef)', keyId: 'cosign.pub (0123456789abcdef)' } },
  compose: { changed: true, diff: '--- a\n+++ b\n', error: null },
  engine: { version: '26.1.5', apiVersion: '1.45', compose: '2.26.1' },
  disk: { free: 500 * MiB, estimate: 20 * MiB, basis: "the last backup's 16.0 MiB times 1.25" },
  quarantine: null,
  policy: { mode: 'manual', decision: 'announced', detail: null },
});

const check = (f: PreflightFacts, id: ReportCheckId) => preflightChecks(f).find((c) => c.id === id)!;

describe('preflight checks', () => {
  it('an update that meets everything passes each check, in the report order', () => {
    const checks = preflightChecks(good());
    expect(checks.map((c) => c.id)).toEqual(['target', 'signature', 'compose', 'migrations', 'engine', 'disk', 'quarantine', 'policy']);
    expect(checks.filter((c) => c.level !== 'pass')).toEqual([]);
    expect(check(good(), 'target').sentence).toBe(`an update from 1.0.0 (${OLD.slice(0, 19)}…) to 1.1.0 (${NEW.slice(0, 19)}…)`);
    expect(check(good(), 'migrations').sentence).toBe('1 migration to apply, each an expand step: the running build keeps serving while they run, and after a rollback');
    expect(check(good(), 'engine').sentence).toBe('the engine is 26.1.5 (API 1.45); the target needs API 1.41 or newer');
    expect(check(good(), 'disk').sentence).toBe("500 MiB is free for a pre-switch backup of about 20 MiB (the last backup's 16.0 MiB times 1.25)");
  });

  it('blocks on an engine below the target minimum, a backup that does not fit, a signature require refuses', () => {
    expect(check({ ...good(), engine: { version: '20.10.24', apiVersion: '1.41', compose: null }, target: { ...good().target!, engineApiMin: '1.44' } }, 'engine')).toEqual({
      id: 'engine',
      level: 'block',
      sentence: 'the engine is 20.10.24 (API 1.41), below the API 1.44 the target needs: upgrade the engine first (docs/engines.md)',
    });
    // Numbers, not text: 1.100 is above 1.41.
    expect(check({ ...good(), engine: { version: 'x', apiVersion: '1.100', compose: null }, target: { ...good().target!, engineApiMin: '1.41' } }, 'engine').level).toBe('pass');
    const full = check({ ...good(), disk: { free: 10 * MiB, estimate: 20 * MiB, basis: 'b' } }, 'disk');
    expect(full.level).toBe('block');
    expect(full.sentence).toBe('the pre-switch backup needs about 20 MiB (b) and 10 MiB is free: free space or lower SELF_UPDATE_BACKUPS_KEEP');
    expect(check({ ...good(), disk: { free: 30 * MiB, estimate: 20 * MiB, basis: 'b' } }, 'disk').level).toBe('warn');
    const refused = { policy: 'require' as const, verdict: { result: 'no-signature' as const, detail: 'the build … has no signature' } };
    expect(check({ ...good(), signature: refused }, 'signature')).toMatchObject({ level: 'block', sentence: 'not verified (no-signature): the build … has no signature; SIGNATURE_POLICY=require refuses it' });
    expect(check({ ...good(), signature: { ...refused, policy: 'warn' } }, 'signature').level).toBe('warn');
  });

  it('warns where a fact is unknown or an update is riskier, and says why', () => {
    expect(check({ ...good(), signature: { policy: 'off', verdict: null } }, 'signature')).toMatchObject({ level: 'warn', sentence: 'the target build is not verified: no signing key is configured (SIGNATURE_PUBLIC_KEYS_FILE)' });
    const contract = check({ ...good(), target: { ...good().target!, pendingMigrations: [{ name: '0024_a', step: 'expand' }, { name: '0025_drop', step: 'contract' }] } }, 'migrations');
    expect(contract).toMatchObject({ level: 'warn', sentence: '2 migrations to apply, 0025_drop a contract step: the build before it cannot serve the migrated schema, so a rollback needs the backup' });
    const unread = { ...good(), target: null, targetError: 'the target build is not local yet: the update check pulls it in the background' };
    expect(check(unread, 'migrations')).toMatchObject({ level: 'warn', sentence: "the target's migrations are not known yet: the target build is not local yet: the update check pulls it in the background" });
    expect(check(unread, 'engine').level).toBe('warn');
    expect(check({ ...good(), engine: { error: 'connect ENOENT' } }, 'engine')).toMatchObject({ level: 'warn', sentence: "the Docker engine's version is not known: connect ENOENT" });
    expect(check({ ...good(), compose: { changed: null, diff: null, error: 'local compose file unreadable: EACCES' } }, 'compose')).toMatchObject({ level: 'warn' });
    expect(check({ ...good(), quarantine: { reason: 'rolled-back', at: '2026-11-20T10:00:00.000Z' } }, 'quarantine')).toMatchObject({
      level: 'warn',
      sentence: 'the target build is quarantined (rolled-back, since 2026-11-20T10:00:00.000Z): the update policy never starts it; a start by hand still may',
    });
    expect(check({ ...good(), targetDigest: null, target: null }, 'target')).toMatchObject({ level: 'warn', sentence: "the channel's newest build is not known (prod-latest): a start cannot resolve what to install" });
    expect(check({ ...good(), targetDigest: OLD }, 'target').sentence).toContain('already runs the newest build of prod');
    expect(check({ ...good(), disk: { free: 30 * MiB, estimate: null, basis: 'its size is known once the first backup is taken' } }, 'disk').level).toBe('pass');
    // The policy's own words when it has them, else its decision.
    expect(check({ ...good(), policy: { mode: 'manual', decision: 'manual', detail: 'mode manual: updates are started by hand only' } }, 'policy').sentence).toBe('the update policy: mode manual: updates are started by hand only');
    expect(check(good(), 'policy').sentence).toBe('the update policy (manual) decided announced');
  });
});

describe('what the observer reads for the report', () => {
  it('the compose diff is unified, from the installed file to the published one, and cut when long', () => {
    expect(composeDiff('a: 1\n', 'a: 1\n')).toBeNull();
    const d = composeDiff('services:\n  backend:\n    image: x:1\n', 'services:\n  backend:\n    image: x:2\n')!;
    expect(d).toContain('--- docker-compose.yml (installed)');
    expect(d).toContain('+++ docker-compose.yml (published)');
    expect(d).toContain('-    image: x:1\n+    image: x:2');
    const long = composeDiff('', 'x\n'.repeat(MAX_DIFF_CHARS));
    expect(long!.length).toBeLessThan(MAX_DIFF_CHARS + 100);
    expect(long).toMatch(/… \(cut at 65536 characters of \d+\)\n$/);
  });

  it('a compiled migration is a contract step only by its own mark', () => {
    expect(isContractStep("export const step = 'contract';\nexport const release = '2.0.0';")).toBe(true);
    expect(isContractStep('export const step = "contract"')).toBe(true);
    expect(isContractStep("// a contract step would say: export const step = 'expand'\nexport async function up() {}")).toBe(false);
  });
});

describe("the backup's room, read at most once a minute for the report", () => {
  afterEach(() => vi.useRealTimers());

  it('answers from the last reading until it is older than the bound; a failed reading is not kept', async () => {
    vi.useFakeTimers({ now: 0 });
    let reads = 0;
    let fail = false;
    const room = recentReading(async () => {
      reads++;
      if (fail) throw new Error('exec failed');
      return reads;
    }, 60_000);
    expect(await room()).toBe(1);
    vi.setSystemTime(59_000);
    expect(await room()).toBe(1);
    vi.setSystemTime(60_001);
    fail = true;
    await expect(room()).rejects.toThrow('exec failed');
    fail = false;
    expect(await room()).toBe(3);
    expect(reads).toBe(3);
  });
});
