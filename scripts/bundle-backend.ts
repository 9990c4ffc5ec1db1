// Bundles the compiled backend (dist/src/main.js) into one ES module for the image, so that a
// starting backend reads one file instead of resolving and compiling hundreds of modules: the
// self-update's outage ends when the new backend listens (docs/self-update.md, "Figures").
//   node --import tsx scripts/bundle-backend.ts <dist-dir>
// writes <dist-dir>/src/bundle/main.js, two levels under <dist-dir> like every other module, so the
// paths it finds relative to itself (migrations/, src/ui/dist/, package.json) are the same.
import { build, type Plugin } from 'esbuild';
import path from 'node:path';

const dist = process.argv[2];
if (!dist) {
  process.stderr.write('usage: node --import tsx scripts/bundle-backend.ts <dist-dir>\n');
  process.exit(2);
}

// Left to node_modules at run time: packages that read files beside their own code (WebAssembly,
// static assets, their package.json) or load optional native addons.
const EXTERNAL = ['@electric-sql/pglite', '@fastify/swagger', '@fastify/swagger-ui', 'pg-native', 'ssh2', 'cpu-features'];

// dockerode loads gRPC and protobuf at import for BuildKit sessions, which only its buildImage uses
// and the installer never calls: a quarter of the start-up's CPU for nothing.
const noBuildKitSession: Plugin = {
  name: 'no-buildkit-session',
  setup(b) {
    b.onResolve({ filter: /^\.\/session$/ }, (args) => (args.importer.includes(`${path.sep}dockerode${path.sep}`) ? { path: 'dockerode-session', namespace: 'stub' } : undefined));
    b.onLoad({ filter: /.*/, namespace: 'stub' }, () => ({
      contents: "module.exports = function withSession() { throw new Error('BuildKit sessions are not part of the installer bundle'); };",
      loader: 'js',
    }));
  },
};

await build({
  entryPoints: [path.join(dist, 'src/main.js')],
  outfile: path.join(dist, 'src/bundle/main.js'),
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  external: EXTERNAL,
  plugins: [noBuildKitSession],
  // CommonJS packages inside an ES module still call require() for Node's built-ins.
  banner: { js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);" },
  minifyWhitespace: true,
  minifySyntax: true,
  keepNames: true,
  legalComments: 'none',
  logLevel: 'warning',
});
