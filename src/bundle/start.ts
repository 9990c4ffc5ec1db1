// The image's backend process (deploy/Dockerfile): runs the bundle beside it (main.js, made by
// scripts/bundle-backend.ts) from the V8 code cache that the image's build made once the bundle had
// started and answered. The cache holds the bytecode of every function that start ran, so a starting
// backend neither parses nor compiles them: a self-update's outage ends at the new backend's first
// answer (docs/adr/0037-code-cache-after-a-start.md).
//
//   node --max-semi-space-size=8 start.js                      runs the backend
//   node --max-semi-space-size=8 start.js --prime-code-cache   at image build: starts the backend
//     twice on an embedded database served on loopback, in a temporary directory; writes
//     main.js.cache after the second start's first healthy answer, removes the directory and exits
//
// The flags must be the same in both: V8 rejects a cache made under other flags. A rejected or
// missing cache costs time, not behaviour; a rejected one is reported on stderr, and
// NODE_DEBUG=installer-code-cache reports what happened to it.
// Node's built-ins come from process.getBuiltinModule, not import statements: importing one into an
// ES module builds its namespace from every export, and node:http's (which priming uses) load Node's
// whole fetch implementation, 50 ms of a start (scripts/bundle-backend.ts does the same for the bundle).
import { listenEarly } from '../early-listeners.ts';

const { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } = process.getBuiltinModule('node:fs');
const { createRequire } = process.getBuiltinModule('node:module');
const path = process.getBuiltinModule('node:path');
const { fileURLToPath, pathToFileURL } = process.getBuiltinModule('node:url');
const { debuglog } = process.getBuiltinModule('node:util');
const { Script } = process.getBuiltinModule('node:vm');

/** The bundle's parameters: the wrapper scripts/bundle-backend.ts puts around it declares them. */
type Bundle = (require: NodeJS.Require, bundleUrl: string, bundleImport: (specifier: string) => Promise<unknown>) => Promise<void>;

const PRIME_FLAG = '--prime-code-cache';
const PRIME_TIMEOUT_MS = 120_000;

const bundleFile = fileURLToPath(new URL('./main.js', import.meta.url));
const cacheFile = `${bundleFile}.cache`;
const debug = debuglog('installer-code-cache');

const priming = process.argv.includes(PRIME_FLAG);
// The backend's ports first, before the bundle is read: a client that asks while the rest loads is
// answered once the backend is ready rather than refused (docs/adr/0038-ports-bound-before-the-start.md).
if (!priming) await listenEarly(process.env);
const cachedData = !priming && existsSync(cacheFile) ? readFileSync(cacheFile) : undefined;
const script = new Script(readFileSync(bundleFile, 'utf8'), { filename: bundleFile, ...(cachedData ? { cachedData } : {}) });
if (!cachedData) debug('%s: no code cache', priming ? 'priming' : 'starting');
else if (script.cachedDataRejected) process.stderr.write(`installer: V8 rejected the code cache ${cacheFile} (made by another Node.js or under other flags); starting without it\n`);
else debug('code cache accepted: %d bytes', cachedData.length);

const bundle = script.runInThisContext() as Bundle;
const run = (): Promise<void> => bundle(createRequire(bundleFile), pathToFileURL(bundleFile).href, (specifier) => import(specifier));

if (priming) await prime();
else await run();

/**
 * Starts the backend twice, as an install and then a switch find the host: the first start (another
 * process) migrates the database and makes the secrets, the certificate and the first user; the
 * second, here, finds them, and once it has answered GET /api/health, its code is the cache.
 */
async function prime(): Promise<never> {
  // V8 drops the bytecode of a function that has not run for a few full collections: without this,
  // the functions the start ran first (the modules' bodies) could be missing from the cache. The
  // flag is set back before the cache is made, which records the flags it was made under: the
  // backend runs with V8's default.
  const { setFlagsFromString } = process.getBuiltinModule('node:v8');
  setFlagsFromString('--no-flush-bytecode');
  const dir = mkdtempSync(path.join(process.getBuiltinModule('node:os').tmpdir(), 'installer-code-cache-'));
  try {
    // The embedded database, served on a loopback port: the backend reaches it through its Postgres
    // driver, as it reaches the installer-postgres container, so the cache holds that path. It starts
    // before the backend, and its start (megabytes of WebAssembly) is over before the backend's.
    const { PGlite } = await import('@electric-sql/pglite');
    const { PGLiteSocketServer } = await import('@electric-sql/pglite-socket');
    const database = await PGlite.create(path.join(dir, 'database'));
    const databasePort = await freePort();
    await new PGLiteSocketServer({ db: database, host: '127.0.0.1', port: databasePort, maxConnections: 20 }).start();
    const port = await freePort();
    // Nothing of these starts stays in the image: their database, secrets, certificate and first
    // user are in `dir`. They serve HTTPS too, as the image's compose files have the backend do.
    for (const name of ['DATABASE_PASSWORD_FILE', 'TLS_CERT_FILE', 'TLS_KEY_FILE', 'INSTALLER_ROLE']) delete process.env[name];
    Object.assign(process.env, {
      DATABASE_URL: `postgres://postgres@127.0.0.1:${databasePort}/postgres`,
      DATA_DIR: dir,
      SECRETS_DIR: path.join(dir, 'secrets'),
      HOST: '127.0.0.1',
      PORT: String(port),
      HTTPS_PORT: String(await freePort()),
      MIGRATE_ON_BOOT: 'true',
      LOG_LEVEL: 'error',
    });
    await firstStart(port);
    // The second start as the compose files run the backend: migrated by then, and logging at info
    // (a quieter level would leave the log lines of a start out of the cache).
    Object.assign(process.env, { MIGRATE_ON_BOOT: 'false', LOG_LEVEL: 'info' });
    // Whatever fails once the backend answers (its controllers start after the listen, and the
    // served database does not keep apart the statements of concurrent connections) does not stop
    // the prime: the code that answered is what the cache is for.
    let failure: string | undefined;
    await listenEarly(process.env);
    run().catch((err: unknown) => {
      failure = err instanceof Error ? (err.stack ?? err.message) : String(err);
    });
    await healthy(port, () => failure && `the backend failed while priming its code cache: ${failure}`);
    setFlagsFromString('--flush-bytecode');
    const data = script.createCachedData();
    writeFileSync(cacheFile, data);
    process.stdout.write(`installer: wrote the code cache ${cacheFile} (${data.length} bytes) after a start that answered GET /api/health\n`);
  } catch (err) {
    process.stderr.write(`installer: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  process.exit();
}

/**
 * The backend's first start on the environment prime() set, in a process of its own, stopped once
 * healthy. It runs the API alone: it is there to make what a first start makes, and without the
 * controllers nothing of it runs beside the second start's queries.
 */
async function firstStart(port: number): Promise<void> {
  const child = process.getBuiltinModule('node:child_process').spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, INSTALLER_ROLE: 'api' },
  });
  let exit: string | undefined;
  const exited = new Promise<void>((resolve) => child.once('exit', (code, signal) => {
    exit = `the backend's first start exited (${signal ?? code}) while priming its code cache`;
    resolve();
  }));
  try {
    await healthy(port, () => exit);
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = process.getBuiltinModule('node:net').createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as import('node:net').AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Resolves at the first 200 from GET /api/health; rejects once `failed` names a failure, or after PRIME_TIMEOUT_MS. */
async function healthy(port: number, failed: () => string | undefined): Promise<void> {
  const deadline = Date.now() + PRIME_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const status = await new Promise<number>((resolve) => {
      const req = process.getBuiltinModule('node:http').get({ host: '127.0.0.1', port, path: '/api/health', agent: false, timeout: 1_000 }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(0));
    });
    if (status === 200) return;
    const failure = failed();
    if (failure) throw new Error(failure);
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`the backend did not answer GET /api/health with 200 within ${PRIME_TIMEOUT_MS / 1000} s while priming its code cache`);
}
