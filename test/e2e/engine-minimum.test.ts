// The oldest engine the installer runs against (src/adapters/engine-version.ts, docs/engines.md):
// the backend started on an engine that reports an API below the minimum stops before it listens,
// with exit code 78 and one line naming the engine's version and the one it needs; on the real
// engine as it is, it starts and says in the diagnostics' engine facts that the engine is
// supported. The old engine is the real one behind a gate that changes the version it reports.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runEntry, type Running } from '../helpers/shared/process.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { EngineGate } from '../helpers/e2e/engine-gate.ts';
import { EX_CONFIG } from '../../src/boot.ts';
import { MIN_ENGINE_API, MIN_ENGINE_RELEASE } from '../../src/adapters/engine-version.ts';
import { readFresh } from '../../src/state/observed.ts';

const dbs: TestDatabase[] = [];
const procs: Running[] = [];
const gates: EngineGate[] = [];
async function release(): Promise<void> {
  for (const p of procs.splice(0)) await p.stop('SIGKILL');
  for (const g of gates.splice(0)) await g.close();
  for (const d of dbs.splice(0)) await d.drop();
}
afterEach(release);
afterAll(release);

async function backendBehind(gate: EngineGate): Promise<{ proc: Running; db: TestDatabase }> {
  const db = await createTestDatabase();
  dbs.push(db);
  const proc = runEntry('src/main.ts', {
    DATABASE_URL: db.url,
    DATA_DIR: mkdtempSync(path.join(tmpdir(), 'engine-minimum-data-')),
    DOCKER_SOCKET: gate.socketPath,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
  });
  procs.push(proc);
  return { proc, db };
}

async function gate(): Promise<EngineGate> {
  const g = new EngineGate(path.join(mkdtempSync(path.join(tmpdir(), 'engine-minimum-gate-')), 'docker.sock'));
  await g.start();
  gates.push(g);
  return g;
}

describe('the engine below the minimum', () => {
  it('stops the backend before it listens, exit 78, saying which engine it found and which it needs', async () => {
    const g = await gate();
    // The real engine's answer, as an engine one release below the minimum would give it.
    g.alter({ method: 'GET', path: /^(\/v[\d.]+)?\/version$/ }, (v) => ({ ...v, Version: '25.0.13', ApiVersion: '1.44', MinAPIVersion: '1.24' }));
    const { proc } = await backendBehind(g);
    expect(await proc.exited).toBe(EX_CONFIG);
    const said = proc.output();
    expect(said).toContain(
      `installer: the Docker engine is 25.0.13 (API 1.44); the installer needs Docker Engine ${MIN_ENGINE_RELEASE} (API ${MIN_ENGINE_API}) or newer: upgrade the engine, then start the installer again (docs/engines.md)`,
    );
    expect(said).not.toMatch(/"msg":"installer listening"/);
  });

  it('the engine as it is: the backend starts, and the engine facts say it is supported', async () => {
    const g = await gate();
    const { proc, db } = await backendBehind(g);
    const base = await proc.url;
    expect((await fetch(`${base}/api/health`)).status).toBe(200);
    const row = await readFresh(db.database.db, 'engine', { maxAgeMs: 60_000, waitMs: 20_000 });
    expect(row?.data?.facts).toMatchObject({ minApiVersion: MIN_ENGINE_API, supported: true });
    expect(g.seen.some((r) => /\/version /.test(r))).toBe(true);
  });
});
