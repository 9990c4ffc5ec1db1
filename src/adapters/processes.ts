// Processes this installer started on its own host: compose runs it must stop after a restart.
import { readFileSync } from 'node:fs';

/** Whether `pid` is a `docker compose -p <project>` process (read from /proc: false when it is gone). */
export function isComposeProcessOf(pid: number, project: string): boolean {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return argv.includes('compose') && argv.includes('-p') && argv[argv.indexOf('-p') + 1] === project;
  } catch {
    return false;
  }
}

/** Sends SIGTERM to the process group `pid` leads; a group that is already gone is not an error. */
export function terminateGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGTERM');
  } catch {
    /* gone meanwhile */
  }
}
