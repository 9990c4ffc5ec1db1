// Healthy means serving and reconciling (docs/adr/0043-healthy-means-reconciling.md), on the real
// server process: GET /api/health answers 200 only once the controllers listen, however long the
// retention takes, and a retention pass that fails (its table locked past the batch's timeout)
// leaves the process running and healthy.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry } from '../helpers/shared/process.ts';
import { freePort } from '../helpers/shared/ports.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { JOBS_CHANNEL } from '../../src/state/jobs.ts';

const SECRETS = {
  JWT_SECRET: 'jwt-secret-0123456789-abcdefghijklmnopqrstuvwxyz',
  ENCRYPTION_KEY: 'encryption-key-0123456789-abcdefghijklmnopqrstu',
  SERVICE_TOKEN: 'service-token-0123456789-abcdefghijklmnopqrstuv',
};

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => db?.drop());

/** The health answer, or null while nothing answers on the port. */
async function health(port: number): Promise<{ status: number; body: unknown } | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/api/health`, { signal: AbortSignal.timeout(2_000) });
    return { status: res.status, body: await res.json() };
  } catch {
    return null;
  }
}

describe('the server process with its job events locked while it starts', () => {
  it('is healthy only once its controllers listen, and a failing retention pass does not end it', async () => {
    // Another session holds the events table: every write to it waits (reads go on).
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    await locker.query('begin');
    await locker.query('lock table deployment_job_events in share mode');
    const port = await freePort();
    const proc = runEntry('src/main.ts', {
      DATABASE_URL: db.url, DATA_DIR: mkdtempSync(path.join(tmpdir(), 'installer-health-')), PORT: String(port), HOST: '127.0.0.1',
      LOG_LEVEL: 'info', RETENTION_BATCH_TIMEOUT_MS: '300', RETENTION_INTERVAL_MINUTES: '0.01', ...SECRETS,
    });
    try {
      const seen: { status: number; body: unknown }[] = [];
      const healthy = await eventually(async () => {
        const h = await health(port);
        if (h) seen.push(h);
        if (h?.status !== 200) return null;
        // The moment it says healthy, the jobs controller already listens.
        const listens = await locker.query(`select 1 from pg_stat_activity where datname = $1 and query = $2`, [db.name, `LISTEN ${JOBS_CHANNEL}`]);
        return { h, listening: listens.rowCount === 1 };
      }, 'a healthy answer', 20_000);
      expect(healthy.listening).toBe(true);
      expect(healthy.h.body).toEqual({ status: 'ok', db: 'up' });
      // Any answer before it said why it was not healthy yet.
      for (const h of seen.slice(0, -1)) expect(h).toEqual({ status: 503, body: { status: 'starting', db: 'up' } });

      // The retention passes fail on the lock, and the process serves on.
      await eventually(() => proc.output().includes('retention: the pass failed'), 'a failed retention pass', 20_000);
      await eventually(() => (proc.output().match(/retention: the pass failed/g) ?? []).length >= 2, 'a second failed pass', 20_000);
      expect(proc.child.exitCode).toBeNull();
      expect((await health(port))?.status).toBe(200);
    } finally {
      await locker.query('rollback').catch(() => {});
      await locker.end();
      const code = await proc.stop();
      if (code !== 0) process.stderr.write(proc.output());
      expect(code).toBe(0);
    }
  });
});
