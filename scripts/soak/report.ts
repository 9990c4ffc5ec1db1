// What the soak counts and prints: its figures, its checks, and its log lines.

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)]!;
export const out = (line: string) => process.stdout.write(`${line}\n`);
export const log = (line: string) => process.stdout.write(`  [${new Date().toISOString().slice(11, 19)}] ${line}\n`);

export interface Figures {
  iterations: number;
  jobsAccepted: number;
  jobsRefused409: number;
  jobsNotAnswered: number;
  updatesStarted: number;
  updatesNewest: number;
  updatesRefused409: number;
  updatesOther: number;
  testEvents: number;
  backendKills: number;
  postgresRestarts: number;
  engineRestarts: number;
  backendBackMs: number[];
}

export function noFigures(): Figures {
  return {
    iterations: 0, jobsAccepted: 0, jobsRefused409: 0, jobsNotAnswered: 0, updatesStarted: 0, updatesNewest: 0, updatesRefused409: 0, updatesOther: 0,
    testEvents: 0, backendKills: 0, postgresRestarts: 0, engineRestarts: 0, backendBackMs: [],
  };
}

/** Records a check and prints it at once. */
export type Check = (name: string, ok: boolean, detail: string) => void;

export class Checks {
  readonly all: { name: string; ok: boolean; detail: string }[] = [];
  readonly check: Check = (name, ok, detail) => {
    this.all.push({ name, ok, detail });
    out(`check ${ok ? 'PASS' : 'FAIL'} ${name}: ${detail}`);
  };

  failed(): { name: string }[] {
    return this.all.filter((c) => !c.ok);
  }
}
