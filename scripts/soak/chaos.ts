// The soak's chaos: platform jobs, self-updates and webhook test events requested through the API,
// while the backend's node process is killed, its Postgres restarted and the engine itself
// restarted, each at random moments.
import type { Images } from '../../test/helpers/e2e/self-update-rig.ts';
import type { Builds } from './builds.ts';
import type { Engine } from './engine.ts';
import type { Receiver } from './receiver.ts';
import { log, pick, sleep, type Check, type Figures } from './report.ts';
import type { Stack } from './stack.ts';

/** Everything a soak run drives, counts and checks. */
export interface SoakRun {
  engine: Engine;
  stack: Stack;
  images: Images;
  builds: Builds;
  receiver: Receiver;
  /** The webhook endpoint that delivers to the receiver. */
  endpointId: string;
  f: Figures;
  check: Check;
}

/** Requests and faults at random until `until`, or until the backend does not come back after a fault. */
export async function chaos(r: SoakRun, until: number): Promise<void> {
  const { stack: s, engine, builds, f } = r;
  log('chaos');
  while (Date.now() < until) {
    f.iterations++;
    const x = Math.random();
    if (x < 0.5) {
      const action = pick(['compose-up', 'restart', 'stop', 'compose-up'] as const);
      const res = await s.call('POST', '/api/deployment/jobs', { action });
      if (res.status === 202) f.jobsAccepted++;
      else if (res.status === 409) f.jobsRefused409++;
      else f.jobsNotAnswered++;
    } else if (x < 0.75) {
      const { tag } = await builds.publishNext(1);
      const res = await s.call('POST', '/api/system/self-update', undefined, 150_000);
      if ((res.status === 200 || res.status === 202) && res.body.started) f.updatesStarted++;
      else if (res.status === 200) f.updatesNewest++;
      else if (res.status === 409) f.updatesRefused409++;
      else f.updatesOther++;
      log(`self-update to ${tag}: ${res.status} ${String(res.body.message ?? res.body.error ?? '').slice(0, 120)}`);
    } else {
      const res = await s.call('POST', `/api/notifications/webhooks/${r.endpointId}/test`);
      if (res.status === 202) f.testEvents++;
    }
    await sleep(Math.random() * 4_000);
    const fault = Math.random();
    if (fault < 0.3) {
      if (await s.killBackend()) {
        f.backendKills++;
        log('backend killed (SIGKILL)');
        if (!(await back(r, 'a SIGKILL'))) break;
      }
    } else if (fault < 0.4) {
      await engine.docker(['restart', '-t', '5', 'installer-postgres']).catch((err: unknown) => log(`postgres restart: ${(err as Error).message}`));
      f.postgresRestarts++;
      log('postgres restarted');
      if (!(await back(r, 'a Postgres restart'))) break;
    } else if (fault < 0.46) {
      await engine.stop();
      await engine.start();
      f.engineRestarts++;
      log('engine restarted');
      if (!(await back(r, 'an engine restart'))) break;
    }
    await sleep(Math.random() * 3_000);
  }
}

/** Waits for the backend to answer again after a fault; false past the bound. */
async function back(r: SoakRun, what: string, boundMs = 4 * 60_000): Promise<boolean> {
  const t0 = Date.now();
  while (Date.now() - t0 < boundMs) {
    if (await r.stack.healthy()) {
      r.f.backendBackMs.push(Date.now() - t0);
      return true;
    }
    await sleep(250);
  }
  r.check(`the backend answers again after ${what}`, false, `no healthy answer within ${boundMs / 1000} s`);
  return false;
}
