// Bundles the backend into one script, so that a starting backend reads one file instead of
// resolving and compiling hundreds of modules: the self-update's outage ends when the new backend
// answers (docs/self-update.md, "Figures"), and one script holds less in memory than its modules
// (idle RSS: docs/reliability.md).
//   node --import tsx scripts/bundle-backend.ts <dist-dir>   for the image: bundles the compiled
//     backend (<dist-dir>/src/main.js) into <dist-dir>/src/bundle/main.js
//   node --import tsx scripts/bundle-backend.ts --source     for `npm start`: makes .artifacts/start,
//     a tree like the image's dist/ of what the backend reads at run time: the sources (src/main.ts)
//     bundled into src/bundle/main.js, its loader (src/bundle/start.js), the migrations as
//     JavaScript, and links to package.json and the built UI (src/ui/dist)
// Either way the bundle sits two levels under its root, like every other module, so the paths it
// finds relative to itself (migrations/, src/ui/dist/, package.json) are the same. Nothing `npm
// start` runs is TypeScript: Node's own type stripping held 24 MB more (its WebAssembly compiler),
// and a TypeScript loader (tsx) about 50 MB more, than the same backend bundled (docs/reliability.md).
// The bundle is not a module but one async function, which its loader (src/bundle/start.ts, beside
// it) compiles with a vm.Script from a code cache and calls with `require`, the bundle's URL (for
// import.meta.url) and an import() for the modules left outside it. A script's cache can be made
// after it ran, with the bytecode of every function its start compiled; a module's cache (Node's
// compile cache) holds only what is compiled before it runs (docs/adr/0037-code-cache-after-a-start.md).
import { build, type Plugin } from 'esbuild';
import { mkdirSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Script } from 'node:vm';

const arg = process.argv[2];
if (!arg) {
  process.stderr.write('usage: node --import tsx scripts/bundle-backend.ts <dist-dir> | --source\n');
  process.exit(2);
}
const fromSource = arg === '--source';
const repo = fileURLToPath(new URL('..', import.meta.url));
/** The root the bundle sits two levels under, and its entry point. */
const root = fromSource ? path.join(repo, '.artifacts/start') : arg;
const entry = fromSource ? path.join(repo, 'src/main.ts') : path.join(root, 'src/main.js');
if (fromSource) await sourceTree();

// Left to node_modules at run time: packages that read files beside their own code in ways a bundle
// cannot follow (WebAssembly) or load optional native addons. @fastify/swagger is bundled: it reads
// its package.json only for defaults the app sets, and loading it (yaml above all) from node_modules
// was a third of building the app.
const EXTERNAL = ['@electric-sql/pglite', 'pg-native', 'ssh2', 'cpu-features'];

// Bundled packages that find their own files through __dirname: each of their modules gets the
// __dirname of its installed copy in node_modules (shipped in the image), so the files are read
// from there. @fastify/swagger-ui reads its viewer's static files so; from node_modules it loaded a
// second copy of @fastify/static and glob when the app registered it, 70-120 ms of every start.
const FILES_BESIDE_CODE = ['@fastify/swagger-ui'];
const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
// A module of one of those packages, with the package's root and name.
const MODULE_OF = new RegExp(`^(.*[\\\\/]node_modules[\\\\/](${FILES_BESIDE_CODE.map(escapeRegExp).join('|')}))[\\\\/].*\\.js$`);
const dirnameOfInstalledCopy: Plugin = {
  name: 'dirname-of-installed-copy',
  setup(b) {
    b.onLoad({ filter: MODULE_OF }, async (args) => {
      const [, root, pkg] = MODULE_OF.exec(args.path)!;
      const inPackage = path.relative(root!, path.dirname(args.path));
      const dirname = `require('node:path').join(require('node:path').dirname(require.resolve(${JSON.stringify(`${pkg}/package.json`)})), ${JSON.stringify(inPackage)})`;
      return { contents: `var __dirname = ${dirname};\n${await readFile(args.path, 'utf8')}`, loader: 'js', resolveDir: path.dirname(args.path) };
    });
  },
};

// Parts of packages the installer never uses, which load heavy packages at import or fill the bundle:
// dockerode's BuildKit sessions and status decoding (gRPC and protobuf; only buildImage and
// Docker.followProgress use them; the installer follows pulls with docker.modem.followProgress),
// docker-modem's SSH transport (ssh2; the installer reaches the engine on its Unix socket,
// src/adapters/docker-engine.ts), and the file listing @fastify/static makes only with
// `wildcard: false` (glob; neither the UI nor the API docs register it so). The Docker parts were
// over a quarter of the start-up's CPU; protobufjs and glob were 350 KB of the bundle, and glob was
// evaluated at every start. Each stub throws if its part is ever reached.
const UNUSED: { pkg: string; request: string; stub: string }[] = [
  { pkg: 'dockerode', request: './session', stub: "module.exports = function withSession() { throw new Error('BuildKit sessions are not part of the installer bundle'); };" },
  { pkg: 'dockerode', request: './buildkit', stub: "module.exports = { followProgress() { throw new Error('Docker.followProgress (BuildKit status decoding) is not part of the installer bundle: use docker.modem.followProgress'); } };" },
  { pkg: 'docker-modem', request: './ssh', stub: "module.exports = function sshAgent() { throw new Error('SSH connections to the engine are not part of the installer bundle'); };" },
  { pkg: '@fastify/static', request: 'glob', stub: "module.exports = { glob() { throw new Error('@fastify/static with wildcard: false is not part of the installer bundle'); } };" },
];
const UNUSED_REQUEST = new RegExp(`^(${[...new Set(UNUSED.map((u) => escapeRegExp(u.request)))].join('|')})$`);
const noUnusedParts: Plugin = {
  name: 'no-unused-parts',
  setup(b) {
    b.onResolve({ filter: UNUSED_REQUEST }, (args) => {
      const i = UNUSED.findIndex((u) => u.request === args.path && args.importer.includes(`${path.sep}${u.pkg}${path.sep}`));
      return i < 0 ? undefined : { path: String(i), namespace: 'stub' };
    });
    b.onLoad({ filter: /.*/, namespace: 'stub' }, (args) => ({ contents: UNUSED[Number(args.path)]!.stub, loader: 'js' }));
  },
};

// Packages installed more than once at the same version (npm nests a copy under each dependent when
// another major sits at the top): the bundle takes one copy of each version instead of one per
// dependent. ajv 8 was bundled three times, for fastify's validator and serializer compilers and
// ajv-formats, and each copy was evaluated at start-up. The copies and their versions are read from
// package-lock.json; a copy the lock does not list stops the build.
const ONE_COPY = ['ajv'];
const lock = JSON.parse(await readFile(new URL('../package-lock.json', import.meta.url), 'utf8')) as { packages: Record<string, { version?: string }> };
/** For each package of ONE_COPY, its installed copies (absolute roots, longest first) and the one kept for each version. */
const copies = new Map(ONE_COPY.map((name) => {
  const roots = Object.entries(lock.packages)
    .filter(([key]) => key === `node_modules/${name}` || key.endsWith(`/node_modules/${name}`))
    .map(([key, meta]) => ({ root: path.resolve(fileURLToPath(new URL('..', import.meta.url)), key), version: meta.version! }));
  const kept = new Map<string, string>();
  for (const { root, version } of [...roots].sort((a, b) => a.root.localeCompare(b.root))) if (!kept.has(version)) kept.set(version, root);
  return [name, { roots: roots.sort((a, b) => b.root.length - a.root.length), kept }];
}));
const ONE_COPY_REQUEST = new RegExp(`^(${ONE_COPY.map(escapeRegExp).join('|')})(/.*)?$`);
const oneCopyPerVersion: Plugin = {
  name: 'one-copy-per-version',
  setup(b) {
    b.onResolve({ filter: ONE_COPY_REQUEST }, async (args) => {
      if (args.pluginData === oneCopyPerVersion) return undefined;
      const resolved = await b.resolve(args.path, { kind: args.kind, importer: args.importer, resolveDir: args.resolveDir, pluginData: oneCopyPerVersion });
      if (resolved.errors.length > 0) return { errors: resolved.errors };
      const { roots, kept } = copies.get(ONE_COPY_REQUEST.exec(args.path)![1]!)!;
      const copy = roots.find((r) => resolved.path.startsWith(r.root + path.sep));
      if (!copy) return { errors: [{ text: `${args.path} resolved to ${resolved.path}, a copy package-lock.json does not list` }] };
      return { ...resolved, path: kept.get(copy.version)! + resolved.path.slice(copy.root.length) };
    });
  },
};

// Node's built-in modules, loaded with require() rather than imported. Importing one into an ES
// module builds its namespace from every export, and node:http's include the WebSocket classes,
// whose getter loads Node's whole fetch implementation (undici): 50-100 ms of every start, for
// classes the backend never uses. require() reads only what the code asks for.
const builtinsByRequire: Plugin = {
  name: 'builtins-by-require',
  setup(b) {
    b.onResolve({ filter: /^node:/ }, (args) => (args.kind === 'import-statement' ? { path: args.path, namespace: 'builtin' } : undefined));
    b.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({ contents: `module.exports = require(${JSON.stringify(args.path)});`, loader: 'js' }));
  },
};

// The project's one import() of modules left outside the bundle (src/db/import-module.ts) calls the
// loader's import() instead: a vm.Script's own would need Node's experimental vm loader.
const IMPORT_MODULE = path.join(path.dirname(path.dirname(entry)), 'src', 'db', `import-module${path.extname(entry)}`);
const importThroughLoader: Plugin = {
  name: 'import-through-loader',
  setup(b) {
    b.onLoad({ filter: /import-module\.[jt]s$/ }, (args) =>
      path.resolve(args.path) === IMPORT_MODULE ? { contents: 'export function importModule(specifier) { return __bundleImport(specifier); }', loader: 'js' } : undefined,
    );
  },
};

// The wrapper that makes the bundle one function (src/bundle/start.ts declares its parameters). The
// banner stays one line, so the bundle's line numbers in stack traces are the file's.
const BANNER = '(async function bundle(require, __bundleUrl, __bundleImport) { "use strict";';
const FOOTER = '})';

const outfile = path.join(root, 'src/bundle/main.js');
// The code cache of an earlier bundle is for other code: V8 would reject it at every start.
rmSync(`${outfile}.cache`, { force: true });
const result = await build({
  metafile: true,
  entryPoints: [entry],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  external: EXTERNAL,
  plugins: [noUnusedParts, oneCopyPerVersion, builtinsByRequire, dirnameOfInstalledCopy, importThroughLoader],
  define: { 'import.meta.url': '__bundleUrl' },
  // CommonJS packages still call require() for Node's built-ins: the loader passes one.
  banner: { js: BANNER },
  footer: { js: FOOTER },
  minifyWhitespace: true,
  minifySyntax: true,
  keepNames: true,
  legalComments: 'none',
  logLevel: 'warning',
});

// What would make the bundle fail as a script, found here rather than at the image's build: an import
// or export statement, import.meta, or an import() of a module left outside it.
const imports = Object.entries(result.metafile.outputs).find(([file]) => path.resolve(file) === path.resolve(outfile))![1].imports;
const outside = imports.filter((i) => i.external && i.kind !== 'require-call');
if (outside.length > 0) throw new Error(`the bundle imports modules outside it other than through src/db/import-module.ts: ${outside.map((i) => `${i.kind} ${i.path}`).join(', ')}`);
new Script(await readFile(outfile, 'utf8'), { filename: outfile });

/**
 * `npm start`'s tree (.artifacts/start), made afresh: the loader and the migrations compiled from
 * their sources, package.json and the built UI linked. Its bundle is written after this, as the
 * image's is. A module outside the bundle (PGlite) is found in the repository's node_modules, above.
 */
async function sourceTree(): Promise<void> {
  rmSync(root, { recursive: true, force: true });
  mkdirSync(path.join(root, 'src/ui'), { recursive: true });
  symlinkSync(path.join(repo, 'package.json'), path.join(root, 'package.json'));
  symlinkSync(path.join(repo, 'src/ui/dist'), path.join(root, 'src/ui/dist'));
  const common = { platform: 'node', format: 'esm', target: 'node24', logLevel: 'warning' } as const;
  // The loader with the one module it imports (src/early-listeners.ts); packages stay imports.
  await build({ ...common, entryPoints: [path.join(repo, 'src/bundle/start.ts')], outfile: path.join(root, 'src/bundle/start.js'), bundle: true, packages: 'external' });
  const migrations = readdirSync(path.join(repo, 'migrations')).filter((f) => f.endsWith('.ts'));
  await build({ ...common, entryPoints: migrations.map((f) => path.join(repo, 'migrations', f)), outdir: path.join(root, 'migrations') });
}
