// The operator UI: the single-page app built by Vite (src/ui, `npm run build:ui`) served at `/`.
// Registered outside the /api child context: one catch-all GET route serves a built file when
// the path names one, else index.html, so the app's own routes (/jobs/…, /audit) survive a reload.
// /api paths never fall back, however spelt (`namesApi`): an unknown one is the API's JSON 404,
// which carries nothing but the path.
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';

/** src/ui/dist beside src/api (dist/src/ui/dist in the image, where build-image.sh puts it). */
export const DEFAULT_UI_DIR = fileURLToPath(new URL('../ui/dist/', import.meta.url));

// The UI loads nothing from elsewhere: scripts and styles are its own files, data comes from /api.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/**
 * Whether a path names something under /api (or /metrics) however it is spelt (any case, dot segments, doubled
 * or encoded slashes, `;` parameters, encoded twice): the UI answers none of those, so a request
 * line that the router did not match to an API route gets the API's 404, never the app.
 */
export function namesApi(decoded: string): boolean {
  let p = decoded;
  for (let i = 0; i < 3 && p.includes('%'); i++) {
    try {
      p = decodeURIComponent(p);
    } catch {
      break;
    }
  }
  const normal = path.posix.normalize(p.replace(/\\/g, '/').replace(/;[^/]*/g, '')).toLowerCase();
  return normal === '/api' || normal === '/api/' || normal.startsWith('/api/') || normal === '/metrics' || normal.startsWith('/metrics/');
}

export async function uiRoutes(app: FastifyInstance, opts: { root?: string }): Promise<void> {
  const root = path.resolve(opts.root ?? DEFAULT_UI_DIR);
  const built = existsSync(path.join(root, 'index.html'));
  if (!built) {
    app.log.warn({ root }, 'the operator UI is not built (npm run build:ui): / answers 503');
  } else {
    // Only reply.sendFile: the catch-all route below decides what is served.
    await app.register(fastifyStatic, { root, serve: false });
  }

  const isFile = (rel: string): boolean => {
    const full = path.join(root, rel);
    if (!full.startsWith(root + path.sep)) return false;
    try {
      return statSync(full).isFile();
    } catch {
      return false;
    }
  };

  app.get('/*', { config: { access: 'public' }, schema: { hide: true } }, async (req, reply) => {
    let pathname: string;
    try {
      // An absolute-form target (`GET http://host/path`) is routed by its path, as here.
      const target = req.url.replace(/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i, '');
      pathname = decodeURIComponent((target.split(/[?#]/)[0] ?? '/').replace(/\/+/g, '/'));
    } catch {
      return reply.callNotFound();
    }
    if (namesApi(pathname)) return reply.callNotFound();
    if (!built) {
      return reply.status(503).type('text/plain; charset=utf-8').send('The operator UI is not built: run `npm run build:ui`, then restart. The API is at /api (docs at /api/docs).\n');
    }
    void reply.header('x-content-type-options', 'nosniff').header('referrer-policy', 'no-referrer');
    const rel = pathname.replace(/^\/+/, '');
    if (rel && !rel.endsWith('/') && isFile(rel)) {
      // Vite names its bundles by content hash: they never change under the same name.
      const hashed = rel.startsWith('assets/');
      return reply.sendFile(rel, hashed ? { maxAge: '365d', immutable: true } : { maxAge: 0 });
    }
    // A path of the app itself (or a missing asset): the app; it shows its own not-found page.
    if (/\.[a-z0-9]{1,8}$/i.test(rel) && rel.startsWith('assets/')) return reply.callNotFound();
    return reply
      .header('cache-control', 'no-cache')
      .header('content-security-policy', CSP)
      .header('x-frame-options', 'DENY')
      .sendFile('index.html', { cacheControl: false });
  });
}
