// Adds a local user or resets a password:  npm run user -- add <username> <role>
// The password is read from standard input (one line), so it never lands in shell history.
import { boot, settingsOrExit } from '../boot.ts';
import { createUser, findUser, setPassword, USERNAME_RULE, listUsers } from '../state/users.ts';
import { ROLES, type Role } from '../db/schema.ts';

const usage = `usage: user add <username> <viewer|operator|admin>   (password on stdin)
       user passwd <username> [role]                  (password on stdin)
       user list`;

async function readPassword(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  const pw = Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0] ?? '';
  if (pw.length < 8) throw new Error('the password on standard input must be at least 8 characters');
  return pw;
}

const [cmd, username, roleArg] = process.argv.slice(2);
const settings = settingsOrExit();
if (!cmd || !['add', 'passwd', 'list'].includes(cmd) || (cmd !== 'list' && !username)) {
  process.stderr.write(`${usage}\n`);
  process.exit(2);
}
if (username && !USERNAME_RULE.test(username)) {
  process.stderr.write(`user name must match ${USERNAME_RULE}\n`);
  process.exit(2);
}
if (roleArg && !ROLES.includes(roleArg as Role)) {
  process.stderr.write(`role must be one of ${ROLES.join(', ')}\n`);
  process.exit(2);
}
const b = await boot(settings, { migrate: true });
try {
  if (cmd === 'list') {
    for (const u of await listUsers(b.database.db)) process.stdout.write(`${u.username}\t${u.role}\n`);
  } else if (cmd === 'add') {
    if (!roleArg) throw new Error('add needs a role');
    if (await findUser(b.database.db, username!)) throw new Error(`user ${username} exists; use passwd`);
    await createUser(b.database.db, { username: username!, password: await readPassword(), role: roleArg as Role });
    process.stdout.write(`added ${username} (${roleArg})\n`);
  } else {
    const ok = await setPassword(b.database.db, username!, await readPassword(), roleArg as Role | undefined);
    if (!ok) throw new Error(`no user ${username}`);
    process.stdout.write(`updated ${username}\n`);
  }
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exitCode = 1;
} finally {
  await b.database.close();
}
