// What a restore must not forget, and the digest a policy decided on, on the real engine, registry
// and installer-postgres (docs/adr/0044-restore-and-decided-digest.md). A build that migrates and
// fails rolls back onto a changed schema; the backup its preflight took is restored exactly as
// docs/deploy.md says; the boot reads the update's outcome and quarantine again from its helper
// (no second alarm, the same notification event), and the policy in `auto` with its window open
// starts nothing. Then the policy decides on a good build, the channel's tag is moved back to the
// quarantined one before preflight resolves it, and preflight aborts: nothing is installed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../helpers/e2e/rig.ts';
import { helperExit, helperState, Images, psql, startInstaller, type InstallerUnderTest } from '../helpers/e2e/self-update-rig.ts';
import { LATEST_MIGRATION, type SelfUpdateCheck as Check } from '../helpers/api/self-update.ts';

const images = new Images();
let i: InstallerUnderTest;
const BASE = 'dev-restore-base';
const CHANGED = 'ROLLED BACK ONTO A CHANGED SCHEMA';
const RESTORED = "recorded again from installer-self-updater after the database was restored from the backup taken in this update's preflight";
const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
/** Open all day, every day: the window is open whenever the test runs. */
const ALWAYS = { days: DAYS, startHour: 0, endHour: 24 };

beforeAll(async () => {
  await images.buildBase(BASE);
  await images.publish(BASE);
  await images.buildVariant('migrates-then-unhealthy', BASE, 'migrates');
  await images.buildVariant('good', BASE, 'good');
  // Every check reads the channel afresh; the observer's own reading stays at its 5 minutes.
  i = await startInstaller(images, BASE, { OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0' });
});

afterAll(async () => {
  await i?.down();
  await images.cleanup();
});

const lines = (text: string) => text.split('\n').filter(Boolean);
const check = async () => {
  const r = await i.get('/api/system/self-update-check');
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as Check;
};
const version = async () => (await i.get('/api/version')).body as { digest: string | null; image: string | null };
const alarms = async () => {
  const r = await run('docker', ['logs', 'installer-backend']);
  return (r.stdout + r.stderr).split('\n').filter((l) => l.includes('"level":"error"') && l.includes(CHANGED));
};
const quarantine = async () => (await i.get('/api/system/quarantine?lifted=true')).body as { digest: string; outcome: string; requestId: string; liftedAt: string | null }[];
const requests = async () => lines(await psql('select r.request_id from self_update_requests r order by r.created_at'));
const events = async (requestId: string) => lines(await psql(`select event_id from notification_outbox where event_id like '%:${requestId}' order by event_id`));
const selfUpdateAudit = async () => Number(await psql(`select count(*) from deployment_actions where kind = 'self-update'`));

async function putPolicy(body: unknown): Promise<void> {
  const res = await fetch(`${i.stack.baseUrl}/api/system/update-policy`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${i.token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  expect(res.status, await res.clone().text()).toBe(200);
}
const policyStatus = async () => ((await i.get('/api/system/update-policy')).body as { status: { decision: string | null; decidedAt: string | null } }).status;

/** A docs/deploy.md command, run as written there; fails the test when it fails. */
async function asDocumented(command: string): Promise<void> {
  const r = await run('sh', ['-c', command]);
  expect(r.code, `${command}: ${r.stderr}`).toBe(0);
}

describe('a restore from the backup of an update that rolled back onto a changed schema', () => {
  let requestId: string;
  let target: string;

  it('keeps what must not be forgotten: the boot reads the outcome and the quarantine again; auto with an open window starts nothing', async () => {
    // A webhook endpoint (nothing listens there): each outcome queues its notifications in the outbox.
    const hook = await i.post('/api/notifications/webhooks', { url: 'https://127.0.0.1:9/hook', allowPrivateNetwork: true });
    expect(hook.status, JSON.stringify(hook.body)).toBe(201);
    const previous = (await version()).digest!;
    target = await images.publish('migrates');

    const r = await i.post('/api/system/self-update');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    expect(await helperExit()).toBe(0);
    const first = await i.until('the rolled-back backend with a reconciled update', async () => {
      if ((await version()).digest !== previous) return null;
      const x = await check();
      return x.lastUpdate.status !== 'started' ? x.lastUpdate : null;
    });
    expect(first).toMatchObject({ status: 'rolled-back', targetDigest: target });
    expect(first.detail).toMatch(new RegExp(`^${CHANGED}; the database was backed up before the update as installer-`));
    const backup = /backed up before the update as (installer-\S+\.dump);/.exec(first.detail!)![1]!;
    requestId = (await requests())[0]!;
    expect(await quarantine()).toMatchObject([{ digest: target, outcome: 'rolled-back', requestId, liftedAt: null }]);
    expect(await events(requestId)).toEqual([`self-update.rolled-back:${requestId}`, `self-update.schema-alarm:${requestId}`]);
    expect(await alarms()).toHaveLength(1);
    expect(await selfUpdateAudit()).toBe(1);
    const helper = (await helperState())!.id;

    // The restore, as docs/deploy.md words it ("Recovering after an update that did not stick").
    await asDocumented('docker stop installer-backend');
    await asDocumented(`docker exec installer-postgres pg_restore --clean --create --if-exists -U installer -d postgres /backups/${backup}`);
    await asDocumented('docker start installer-backend');
    await i.until('the old build healthy on the restored database', async () => {
      const h = await run('docker', ['inspect', '-f', '{{.State.Health.Status}}', 'installer-backend']);
      return h.stdout.trim() === 'healthy' && (await i.get('/api/health')).status === 200;
    });
    // The restore took the schema back.
    expect((await psql('select name from kysely_migration order by name desc limit 1'))).toBe(LATEST_MIGRATION);
    expect(await version()).toMatchObject({ digest: previous });

    // The outcome, read again from the helper: rolled back (the schema is the backup's now), saying so.
    const again = await i.until('the outcome read again', async () => {
      const l = (await check()).lastUpdate;
      return l.status && l.status !== 'started' ? l : null;
    });
    expect(again).toMatchObject({ status: 'rolled-back', targetDigest: target });
    expect(again.detail).toMatch(/^rolled back: the switch to dev-latest failed \(.*\); helper exit 0; still on the previous image /);
    expect(again.detail!.endsWith(`; ${RESTORED}`)).toBe(true);
    expect(await psql(`select phase || ' ' || (restored_at is not null) from self_update_status where request_id = '${requestId}'`)).toBe('rolled-back true');
    // Quarantined exactly once; the audit row recorded again, once; no second alarm; the outcome's
    // notification is the same event as before the restore, and no second schema alarm is queued.
    expect(await quarantine()).toMatchObject([{ digest: target, outcome: 'rolled-back', requestId, liftedAt: null }]);
    expect(await selfUpdateAudit()).toBe(1);
    expect(await alarms()).toHaveLength(1);
    expect(await events(requestId)).toEqual([`self-update.rolled-back:${requestId}`]);
    expect((await helperState())!.id).toBe(helper);

    // The policy in auto with its window open: the channel still offers the failed build; nothing starts.
    await putPolicy({ mode: 'auto', window: ALWAYS });
    const decided = await i.until('the policy to decide on the channel read after the outcome', async () => {
      const s = await policyStatus();
      return (await requests()).length > 1 || s.decision === 'quarantined' ? s : null;
    });
    expect(decided.decision).toBe('quarantined');
    expect(await requests()).toEqual([requestId]);
  });

  it('a policy start installs the digest decided on or none: the tag moved back to the quarantined build before preflight aborts it', async () => {
    await putPolicy({ mode: 'manual' });
    const previous = (await version()).digest!;
    const helper = (await helperState())!.id;
    const good = await images.publish('good');
    // The observer's channel row offers the good build.
    await i.until('the channel read with the good build', async () => ((await check()).remoteDigest === good ? true : null));
    // The tag moves back to the quarantined build; nothing reads the channel again before the start.
    expect(await images.publish('migrates')).toBe(target);

    await putPolicy({ mode: 'auto', window: ALWAYS });
    const started = await i.until('the policy start to end its preflight', async () => {
      const ids = await requests();
      if (ids.length < 2) return null;
      const row = await psql(`select coalesce(r.decided_digest, 'none') || ' | ' || s.phase || ' | ' || coalesce(s.abort_code, '') || ' | ' || coalesce(s.detail, '') from self_update_requests r join self_update_status s using (request_id) where r.request_id = '${ids.at(-1)}'`);
      return ['requested', 'preflight'].includes(row.split(' | ')[1] ?? '') ? null : row;
    });
    const [decidedDigest, phase, code, detail] = started.split(' | ');
    expect({ decidedDigest, phase, code }).toEqual({ decidedDigest: good, phase: 'aborted', code: 'preflight' });
    expect(detail).toMatch(
      new RegExp(
        `^checking: the update policy decided on ${good}, but \\S+:dev-latest now names ${target}; ${target} is quarantined \\(its update ${requestId} ended rolled-back at [^)]+\\): the update policy never starts it; an update started by hand lifts it; nothing was changed$`,
      ),
    );
    // Nothing installed: the same build runs, no helper started, no audit row, the quarantine kept.
    expect(await version()).toMatchObject({ digest: previous });
    expect((await helperState())!.id).toBe(helper);
    expect(await selfUpdateAudit()).toBe(1);
    expect(await quarantine()).toMatchObject([{ digest: target, liftedAt: null }]);
  });
});
