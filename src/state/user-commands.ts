// The `user` CLI's commands, run either by the CLI on the database itself or, when the embedded
// database is in use by the running installer, by the installer on the CLI's behalf (through its
// local socket). One implementation for both, so both apply the same rules.
import type { Kysely } from 'kysely';
import { z } from 'zod';
import type { DB, Role } from '../db/schema.ts';
import { ROLES } from '../db/schema.ts';
import { AppError } from '../errors.ts';
import { addUser, passwordProblem, resetPassword, userViews, USERNAME_RULE, USERNAME_RULE_TEXT } from './users.ts';

export const userCommandSchema = z.discriminatedUnion('op', [
  z.strictObject({ op: z.literal('list') }),
  z.strictObject({ op: z.literal('add'), username: z.string(), role: z.string(), password: z.string(), actor: z.string().max(200) }),
  z.strictObject({ op: z.literal('passwd'), username: z.string(), role: z.string().optional(), password: z.string(), actor: z.string().max(200) }),
]);
export type UserCommand = z.infer<typeof userCommandSchema>;

export interface UserCommandResult {
  ok: boolean;
  /** Text for standard output (ok) or standard error. */
  output: string;
  /** The process's exit code: 0, 1 (refused), 2 (usage). */
  exitCode: number;
  /** The user that changed, for the caller's log line and token check; never a password. */
  changed?: { user: string; change: string; role?: Role };
}

const refused = (output: string, exitCode = 1): UserCommandResult => ({ ok: false, output, exitCode });

/** What is wrong with the arguments, or null; checked before the database is touched. */
export function userCommandProblem(cmd: { username?: string; role?: string | undefined }): string | null {
  if (cmd.username !== undefined && !USERNAME_RULE.test(cmd.username)) return `user name must be ${USERNAME_RULE_TEXT}`;
  if (cmd.role !== undefined && !ROLES.includes(cmd.role as Role)) return `role must be one of ${ROLES.join(', ')}`;
  return null;
}

export async function runUserCommand(db: Kysely<DB>, cmd: UserCommand): Promise<UserCommandResult> {
  if (cmd.op === 'list') {
    const lines = (await userViews(db)).map((u) => `${u.username}\t${u.role}${u.disabled ? '\tdisabled' : ''}${u.mustChangePassword ? '\tmust-change-password' : ''}\n`);
    return { ok: true, output: lines.join(''), exitCode: 0 };
  }
  const problem = userCommandProblem(cmd);
  if (problem) return refused(problem, 2);
  const weak = passwordProblem(cmd.password);
  if (weak) return refused(`${weak} (read from standard input)`);
  try {
    if (cmd.op === 'add') {
      const u = await addUser(db, { username: cmd.username, password: cmd.password, role: cmd.role as Role, mustChangePassword: false });
      return { ok: true, output: `added ${u.username} (${u.role})\n`, exitCode: 0, changed: { user: u.username, change: 'added', role: u.role } };
    }
    const u = await resetPassword(db, cmd.username, cmd.password, { mustChangePassword: false, ...(cmd.role ? { role: cmd.role as Role } : {}) });
    return { ok: true, output: `updated ${u.username}\n`, exitCode: 0, changed: { user: u.username, change: 'password-reset', role: u.role } };
  } catch (err) {
    if (err instanceof AppError && err.statusCode < 500) {
      return refused(err.code === 'conflict' && cmd.op === 'add' ? `user ${cmd.username} exists; use passwd` : err.message);
    }
    throw err;
  }
}
