// Adds a local user, resets a password, or lists users:  npm run user -- add <username> <role>
// The password is read from standard input (one line), so it never lands in shell history.
// On Postgres the CLI changes the database itself (running installers hear of it by NOTIFY). On
// the embedded database, which one process at a time can open, a running installer does the
// change on the CLI's behalf through its local socket (docs/adr/0016-user-management.md).
import { userInfo } from 'node:os';
import { existsSync } from 'node:fs';
import { boot, settingsOrExit } from '../boot.ts';
import { DatabaseLockedError } from '../db/database.ts';
import { askLocalSocket, localSocketPath } from '../adapters/local-socket.ts';
import { runUserCommand, userCommandProblem, type UserCommand, type UserCommandResult } from '../state/user-commands.ts';
import { PASSWORD_MIN } from '../state/users.ts';

const usage = `usage: user add <username> <viewer|operator|admin>   (password on stdin)
       user passwd <username> [role]                  (password on stdin)
       user list`;

async function readPassword(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0] ?? '';
}

function actor(): string {
  try {
    return `cli:${userInfo().username}`;
  } catch {
    return `cli:uid-${process.getuid?.() ?? 'unknown'}`;
  }
}

const [cmd, username, roleArg] = process.argv.slice(2);
const settings = settingsOrExit();
if (!cmd || !['add', 'passwd', 'list'].includes(cmd) || (cmd !== 'list' && !username) || (cmd === 'add' && !roleArg)) {
  process.stderr.write(`${usage}\n`);
  process.exit(2);
}
const problem = userCommandProblem({ ...(username !== undefined ? { username } : {}), ...(roleArg !== undefined ? { role: roleArg } : {}) });
if (problem) {
  process.stderr.write(`${problem}\n`);
  process.exit(2);
}
let command: UserCommand;
if (cmd === 'list') command = { op: 'list' };
else {
  const password = await readPassword();
  if (password.length < PASSWORD_MIN) {
    process.stderr.write(`the password on standard input must be at least ${PASSWORD_MIN} characters\n`);
    process.exit(1);
  }
  command = cmd === 'add'
    ? { op: 'add', username: username!, role: roleArg!, password, actor: actor() }
    : { op: 'passwd', username: username!, ...(roleArg ? { role: roleArg } : {}), password, actor: actor() };
}

function finish(result: UserCommandResult): void {
  (result.ok ? process.stdout : process.stderr).write(result.output);
  process.exitCode = result.exitCode;
}

try {
  const b = await boot(settings, { migrate: true });
  try {
    const result = await runUserCommand(b.database.db, command);
    if (result.changed) b.logger.info({ actor: command.op === 'list' ? undefined : command.actor, ...result.changed }, 'user changed');
    finish(result);
  } finally {
    await b.database.close();
  }
} catch (err) {
  const socket = localSocketPath(settings.DATA_DIR);
  if (!(err instanceof DatabaseLockedError)) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exitCode = 1;
  } else if (!existsSync(socket)) {
    // The installer opens its socket once it has started: a moment after it took the database.
    process.stderr.write(`${(err as Error).message}\n(no ${socket} yet: if the installer is starting, try again in a moment)\n`);
    process.exitCode = 1;
  } else {
    // The running installer holds the embedded database: it makes the change.
    try {
      finish((await askLocalSocket(socket, command)) as UserCommandResult);
    } catch (e) {
      process.stderr.write(`the installer holds the embedded database, and its socket ${socket} did not answer: ${(e as Error).message}\n`);
      process.exitCode = 1;
    }
  }
}
