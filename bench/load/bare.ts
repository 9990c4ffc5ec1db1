// A bare Fastify handler in a process of its own, the baseline the installer's endpoints are set
// against: /health answers small JSON (the baseline of /api/health), /actions sends the bytes of a
// file (the installer's audit page, the baseline of /api/deployment/actions). Each process only ever
// serves one route: a process that serves both answers its first route more slowly once it has
// served the second.
import path from 'node:path';
import { freePort, http, sleep, startProc, type Proc } from './processes.ts';
import { NODE } from '../../test/helpers/shared/process.ts';

function bareCode(port: number, bodyFile: string): string {
  return `
      import Fastify from 'fastify';
      import { readFileSync } from 'node:fs';
      const actions = readFileSync(${JSON.stringify(bodyFile)}, 'utf8');
      const app = Fastify({ logger: false });
      app.get('/health', async () => ({ status: 'ok', db: 'up' }));
      app.get('/actions', async (_req, reply) => reply.type('application/json; charset=utf-8').send(actions));
      await app.listen({ host: '127.0.0.1', port: ${port} });
      console.log('listening');`;
}

/** Starts the bare handler (its output in `<logDir>/<name>.log`) and waits until it answers. */
export async function startBare(name: string, bodyFile: string, logDir: string): Promise<{ proc: Proc; port: number }> {
  const port = await freePort();
  const p = startProc(name, NODE, ['--input-type=module', '-e', bareCode(port, bodyFile)], { logFile: path.join(logDir, `${name}.log`) });
  for (let i = 0; ; i++) {
    if (p.child.exitCode !== null) throw new Error(`the bare Fastify server exited:\n${p.tail()}`);
    if (i > 500) throw new Error('the bare Fastify server did not listen within 5 s');
    if (await http(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false)) break;
    await sleep(10);
  }
  return { proc: p, port };
}
