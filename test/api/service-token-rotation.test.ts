// Rotating the service token by replacing its file, on the real server process: no restart, the
// retiring token can overlap for a while, a broken file fails closed, and no token is ever printed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, renameSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, type Running } from '../helpers/shared/process.ts';

const token = (name: string) => `${name}-${randomBytes(24).toString('base64url')}`;

/** Replaces a file the way an operator should: write a new file beside it, then rename it over. */
function replaceFile(file: string, content: string): void {
  const tmp = `${file}.new`;
  writeFileSync(tmp, content, { mode: 0o600 });
  renameSync(tmp, file);
}

let db: TestDatabase;
const procs: Running[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  for (const p of procs) await p.stop('SIGKILL');
  await db?.drop();
});

async function start(env: Record<string, string>): Promise<{ base: string; proc: Running }> {
  const proc = runEntry('src/main.ts', { DATABASE_URL: db.url, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env });
  procs.push(proc);
  return { base: await proc.url, proc };
}

async function statusWith(base: string, t: string): Promise<number> {
  const res = await fetch(`${base}/api/deployment/actions`, { headers: { authorization: `Bearer ${t}` } });
  await res.arrayBuffer();
  return res.status;
}

/** A request whose URL carries the token, so the request log line would show it if it were not scrubbed. */
async function probeLog(base: string, t: string): Promise<void> {
  await (await fetch(`${base}/api/no-such-route?probe=${t}`)).arrayBuffer();
}

describe('service token rotation', () => {
  it('follows SERVICE_TOKEN_FILE: overlap, switch, a broken file fails closed, then recovery', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-rotate-'));
    const file = path.join(dir, 'service-token');
    const [a, b, c] = [token('AAAA'), token('BBBB'), token('CCCC')];
    writeFileSync(file, `${a}\n`, { mode: 0o600 });
    const { base, proc } = await start({ DATA_DIR: dir, SERVICE_TOKEN_FILE: file });

    expect(await statusWith(base, a)).toBe(200);
    expect(await statusWith(base, b)).toBe(401);

    // Roll out: the new token first, the retiring one on the second line.
    replaceFile(file, `${b}\n${a}\n`);
    expect(await statusWith(base, b)).toBe(200);
    expect(await statusWith(base, a)).toBe(200);
    await probeLog(base, b);

    // The control plane has the new token: retire the old one.
    replaceFile(file, `${b}\n`);
    expect(await statusWith(base, b)).toBe(200);
    expect(await statusWith(base, a)).toBe(401);

    // A token too short to be one: nothing is accepted until the file is fixed.
    replaceFile(file, 'short\n');
    expect(await statusWith(base, b)).toBe(401);
    replaceFile(file, `${c}\n`);
    expect(await statusWith(base, c)).toBe(200);
    expect(await statusWith(base, b)).toBe(401);
    await probeLog(base, c);

    // Even a write in place (no rename) is noticed.
    writeFileSync(file, `${a}\n`);
    expect(await statusWith(base, a)).toBe(200);
    expect(await statusWith(base, c)).toBe(401);

    await proc.stop();
    const out = proc.output();
    for (const t of [a, b, c]) expect(out).not.toContain(t);
    expect(out).toContain('service token file changed');
    expect(out).toContain('the service token file is not valid (each line must be one token of at least 32 characters without spaces)');
    // The probes were logged, with the rotated-in tokens scrubbed.
    expect(out.match(/probe=\[REDACTED\]/g)?.length ?? 0).toBeGreaterThanOrEqual(2);
  });

  it('follows the generated token file in the secrets directory', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-rotate-'));
    const { base, proc } = await start({ DATA_DIR: dir });
    const file = path.join(dir, 'secrets', 'service-token');
    const generated = readFileSync(file, 'utf8').trim();
    expect(await statusWith(base, generated)).toBe(200);
    const next = token('DDDD');
    replaceFile(file, `${next}\n`);
    expect(await statusWith(base, next)).toBe(200);
    expect(await statusWith(base, generated)).toBe(401);
    await proc.stop();
    expect(proc.output()).not.toContain(next);
    expect(proc.output()).not.toContain(generated);
  });

  it('a token set in the environment does not change while the process lives', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-rotate-'));
    const fixed = token('EEEE');
    const { base, proc } = await start({ DATA_DIR: dir, SERVICE_TOKEN: fixed });
    // The generated file is not consulted when the token comes from the environment.
    replaceFile(path.join(dir, 'secrets', 'service-token'), `${token('FFFF')}\n`);
    expect(await statusWith(base, fixed)).toBe(200);
    await proc.stop();
  });
});
