// The two ends of a self-update's downtime as the real server process records them: a backend
// stopped with SIGTERM while an update's helper runs writes when it stopped answering, the next
// one to listen writes its readiness; a backend killed with SIGKILL writes nothing, and the
// downtime is then null with the reason.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry } from '../helpers/shared/process.ts';
import { requestSelfUpdate, updateSelfUpdate } from '../../src/state/self-update.ts';
import { NO_LAST_ANSWER, settleDowntime } from '../../src/state/update-history.ts';

const SECRETS = {
  JWT_SECRET: 'JWTSECRETVALUE-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d',
  ENCRYPTION_KEY: 'ENCKEYVALUE-2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e',
  SERVICE_TOKEN: 'SVCTOKENVALUE-3c4d5e6f-7a8b-4c9d-0e1f-2a3b4c5d6e7f',
  DATABASE_PASSWORD: 'DBPASSWORDVALUE-4d5e6f7a',
};

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => db?.drop());

// The API role: the measuring is the serving process's own. With the controllers too, this process
// would reconcile the update below as soon as it saw no installer-self-updater on the engine (there
// is none: no helper runs here), and a finished update has no downtime left to record.
const start = () =>
  runEntry('src/main.ts', { DATABASE_URL: db.url, DATA_DIR: mkdtempSync(path.join(tmpdir(), 'installer-hist-')), PORT: '0', HOST: '127.0.0.1', INSTALLER_ROLE: 'api', ...SECRETS });

/** An update whose helper runs, as the self-update controller leaves it. */
async function helperRunning(): Promise<string> {
  await db.database.db.deleteFrom('self_update_requests').execute();
  const id = await requestSelfUpdate(db.database.db, { id: 'amy' });
  await updateSelfUpdate(db.database.db, id, { phase: 'helper-running', actionId: '1', targetDigest: 'sha256:new', previousDigest: 'sha256:old' });
  return id;
}
const row = (id: string) => db.database.db.selectFrom('self_update_status').select(['last_answer_at', 'first_ready_at']).where('request_id', '=', id).executeTakeFirstOrThrow();

// Each test starts two real server processes, one after the other: tens of seconds on a busy machine.
describe('the server process measures a self-update', { timeout: 120_000 }, () => {
  it('SIGTERM while the helper runs records when it stopped answering; the next backend its readiness', async () => {
    const old = start();
    const base = await old.url;
    const id = await helperRunning();
    expect((await fetch(`${base}/api/health`)).status).toBe(200);
    const answered = Date.now();
    // Listening, but idle: it serves until it stops accepting.
    await new Promise((r) => setTimeout(r, 300));
    const stopping = Date.now();
    expect(await old.stop()).toBe(0);
    const stopped = Date.now();
    const { last_answer_at } = await row(id);
    expect(last_answer_at, old.output()).not.toBeNull();
    const lastAnswer = new Date(last_answer_at!).getTime();
    expect(lastAnswer).toBeGreaterThanOrEqual(stopping);
    expect(lastAnswer).toBeLessThanOrEqual(stopped);
    expect(lastAnswer - answered).toBeGreaterThanOrEqual(300);
    expect(old.output()).toContain('recorded the last answer as the start of its downtime');

    const next = start();
    try {
      await next.url;
      const readyBy = Date.now();
      const ends = await row(id);
      expect(ends.first_ready_at, next.output()).not.toBeNull();
      const ready = new Date(ends.first_ready_at!).getTime();
      expect(ready).toBeGreaterThan(lastAnswer);
      expect(ready).toBeLessThanOrEqual(readyBy);
      expect(await settleDowntime(db.database.db, id)).toEqual({ ms: ready - lastAnswer, note: null });
    } finally {
      expect(await next.stop()).toBe(0);
    }
  });

  it('a backend killed with SIGKILL records nothing: the downtime is null with the reason', async () => {
    const old = start();
    const base = await old.url;
    const id = await helperRunning();
    expect((await fetch(`${base}/api/health`)).status).toBe(200);
    await old.stop('SIGKILL');
    expect((await row(id)).last_answer_at).toBeNull();
    const next = start();
    try {
      await next.url;
      expect((await row(id)).first_ready_at).not.toBeNull();
      expect(await settleDowntime(db.database.db, id)).toEqual({ ms: null, note: NO_LAST_ANSWER });
    } finally {
      expect(await next.stop()).toBe(0);
    }
  });
});
