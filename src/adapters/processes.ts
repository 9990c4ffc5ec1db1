// Processes this installer started on its own host: docker CLI runs it must stop after a restart.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

/** The argument vector of `pid` (read from /proc), or null when it is gone. */
function argvOf(pid: number): string[] | null {
  try {
    // Every argument ends with a NUL, the last one too.
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0$/, '').split('\0');
  } catch {
    return null;
  }
}

/**
 * Whether `pid` is a docker CLI run of the platform `project`: `docker compose -p <project>` on one
 * host, or on a Swarm `docker stack … <project>` and `docker service … <project>_<service>` (the
 * steps of controllers/compose-job/swarm-steps.ts). False when it is gone.
 */
export function isPlatformProcessOf(pid: number, project: string): boolean {
  const argv = argvOf(pid);
  if (!argv) return false;
  if (argv.includes('compose')) return argv.includes('-p') && argv[argv.indexOf('-p') + 1] === project;
  if (basename(argv[0] ?? '') !== 'docker') return false;
  if (argv[1] === 'stack') return argv.length > 3 && argv.at(-1) === project;
  if (argv[1] === 'service') return argv.slice(2).some((a) => a.startsWith(`${project}_`));
  return false;
}

/** Sends SIGTERM to the process group `pid` leads; a group that is already gone is not an error. */
export function terminateGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGTERM');
  } catch {
    /* gone meanwhile */
  }
}
