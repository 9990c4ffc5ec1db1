// The load bench's processes: started with their output to a file and stopped whatever happens,
// commands run to their end, one-off HTTP requests, and what /proc says of a process.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { ROOT } from '../../test/helpers/shared/process.ts';

export { freePort } from '../../test/helpers/shared/ports.ts';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  exited: Promise<void>;
  /** The end of what it printed (stdout and stderr go to a file, so the bench never parses request logs). */
  tail(): string;
  stop(): Promise<void>;
}

/** Everything started here, stopped in `finally` whatever happened. */
export const live = new Set<Proc>();

export function startProc(name: string, cmd: string, args: string[], opts: { env?: Record<string, string>; cwd?: string; logFile: string }): Proc {
  const fd = openSync(opts.logFile, 'w');
  const child = spawn(cmd, args, {
    cwd: opts.cwd ?? ROOT,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', ...opts.env },
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  const exited = new Promise<void>((res) => child.once('exit', () => res()));
  const p: Proc = {
    name,
    child,
    pid: child.pid ?? -1,
    exited,
    tail: () => {
      try {
        return readFileSync(opts.logFile, 'utf8').slice(-4_000);
      } catch {
        return '';
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const killed = await Promise.race([exited.then(() => true), sleep(10_000).then(() => false)]);
        if (!killed) {
          child.kill('SIGKILL');
          await exited;
        }
      }
      live.delete(p);
    },
  };
  child.once('error', () => {}); // a spawn failure shows as an exit
  live.add(p);
  return p;
}

/** Runs a command to its end, collecting its output; rejects on a non-zero exit unless `allowFail`. */
export function run(cmd: string, args: string[], opts: { cwd?: string; allowFail?: boolean } = {}): Promise<{ code: number; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd ?? ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => {
      if (code !== 0 && !opts.allowFail) reject(new Error(`${cmd} ${args.join(' ')} exited ${code}:\n${out.slice(-3_000)}`));
      else resolve({ code: code ?? -1, out });
    });
  });
}

/** One HTTP request on a fresh connection (no pool that could keep the server from closing). */
export function http(url: string, opts: { method?: string; body?: unknown; token?: string } = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const req = request(
      url,
      {
        method: opts.method ?? 'GET',
        agent: false,
        timeout: 2_000,
        headers: {
          connection: 'close',
          ...(payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
          ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
        },
      },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(payload);
  });
}

export function rssMB(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) / 1024;
}

/** CPU time (user + system) the process has used, in ms (USER_HZ is 100 on Linux). */
export function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}
