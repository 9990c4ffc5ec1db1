// A self-update request is its writer's until a controller claims it
// (docs/adr/0052-routes-ask-through-read-models-and-request-writers.md): the API may withdraw it while no
// controller has, and never after. Withdrawal and claim race here on the machine's Postgres, many
// times: exactly one of them wins each time, and the loser writes nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { claimNextSelfUpdate, finishTranscript, getSelfUpdate, requestSelfUpdate, updateSelfUpdate, withdrawUnclaimed } from '../../src/state/self-update.ts';
import { getJob } from '../../src/state/jobs.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

const actor = { id: 'amy', email: 'amy@example.com', kind: 'user' as const };
const eventCount = async (jobId: string) =>
  Number((await t.database.db.selectFrom('deployment_job_events').select((e) => e.fn.countAll().as('n')).where('job_id', '=', jobId).executeTakeFirstOrThrow()).n);

describe('withdrawing an unclaimed self-update', () => {
  it('races a claim: exactly one wins, and a withdrawal that lost writes nothing', async () => {
    const db = t.database.db;
    const won = { withdrawn: 0, claimed: 0 };
    for (let i = 0; i < 30; i++) {
      const requestId = await requestSelfUpdate(db, actor);
      const jobId = (await getSelfUpdate(db, requestId))!.jobId!;
      const before = await eventCount(jobId);
      // Alternate which starts first, so that each side sometimes takes the row's lock first.
      const withdraw = () => withdrawUnclaimed(db, requestId, 'no self-update controller claimed the request');
      const claim = () => claimNextSelfUpdate(db, 'worker-a');
      const [withdrawn, claimed] = i % 2 ? await Promise.all([withdraw(), claim()]) : (await Promise.all([claim(), withdraw()])).reverse() as [boolean, Awaited<ReturnType<typeof claim>>];
      const view = (await getSelfUpdate(db, requestId))!;
      const job = (await getJob(db, jobId))!;
      if (withdrawn) {
        won.withdrawn++;
        expect(claimed, 'a withdrawn request is never claimed').toBeUndefined();
        expect(view.phase).toBe('aborted');
        expect(job.phase).toBe('failed');
        expect(await eventCount(jobId)).toBe(before + 2); // the decision and `finished`
      } else {
        won.claimed++;
        expect(claimed?.requestId).toBe(requestId);
        expect(view.phase).toBe('preflight');
        expect(job.phase, 'the claimed update\'s job is its controller\'s: still running').toBe('running');
        expect(await eventCount(jobId), 'the losing withdrawal appended nothing').toBe(before);
        // The controller ends it, so that the next request is not refused as a conflict.
        await updateSelfUpdate(db, requestId, { phase: 'aborted', abortCode: 'preflight', detail: 'ended by the test', finished: true });
        await finishTranscript(db, jobId, { state: 'aborted', detail: 'ended by the test', exitCode: null });
      }
    }
    expect(won.withdrawn + won.claimed).toBe(30);
  });

  it('never withdraws a request after its claim', async () => {
    const db = t.database.db;
    const requestId = await requestSelfUpdate(db, actor);
    expect((await claimNextSelfUpdate(db, 'worker-b'))?.requestId).toBe(requestId);
    expect(await withdrawUnclaimed(db, requestId, 'too late')).toBe(false);
    expect((await getSelfUpdate(db, requestId))!.phase).toBe('preflight');
  });
});
