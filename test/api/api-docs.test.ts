// The API document (/api/docs): off by default in production, on when API_DOCS says so, and then
// served with a Content-Security-Policy that runs no inline script and loads nothing from
// elsewhere; docs/access.md's route table is the app's own, and `npm run docs:access -- --check`
// agrees. Every request goes to a real listening server.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestAppOptions } from '../helpers/api/app.ts';
import { renderAccessTable, spliceAccessTable } from '../../src/api/access-doc.ts';
import { API_DOCS_CSP } from '../../src/api/app.ts';
import { ConfigError, loadSettings } from '../../src/config.ts';
import { NODE, ROOT } from '../helpers/shared/process.ts';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function serve(env: Record<string, string>, opts: TestAppOptions = {}): Promise<string> {
  t = await startTestApp({ ...opts, env });
  return t.app.listen({ host: '127.0.0.1', port: 0 });
}

const DOC_PATHS = ['/api/docs', '/api/docs/', '/api/docs/json', '/api/docs/yaml', '/api/docs/static/swagger-ui-bundle.js', '/api/docs/static/swagger-initializer.js'];

/** The CSP's directives by name. */
function directives(csp: string): Map<string, string[]> {
  return new Map(
    csp
      .split(';')
      .map((d) => d.trim().split(/\s+/))
      .filter((d) => d[0])
      .map(([name, ...values]) => [name!, values]),
  );
}

describe('the API document', () => {
  it('is not served in production unless API_DOCS=on', async () => {
    const base = await serve({ NODE_ENV: 'production' });
    for (const p of DOC_PATHS) {
      const res = await fetch(`${base}${p}`);
      expect(res.status, p).toBe(404);
      expect(await res.json(), p).toMatchObject({ statusCode: 404, code: 'not_found' });
    }
    expect(t!.app.routeTable.filter((r) => r.url.startsWith('/api/docs'))).toEqual([]);
    // The API itself is unchanged.
    expect((await fetch(`${base}/api/health`)).status).toBe(200);
    expect((await fetch(`${base}/api/version`)).status).toBe(401);
  });

  it('is not served with API_DOCS=off, whatever NODE_ENV says', async () => {
    const base = await serve({ NODE_ENV: 'development', API_DOCS: 'off' });
    for (const p of DOC_PATHS) expect((await fetch(`${base}${p}`)).status, p).toBe(404);
  });

  it('is served with API_DOCS=on in production, with a CSP that allows only its own files and no inline script', async () => {
    const base = await serve({ NODE_ENV: 'production', API_DOCS: 'on' });
    for (const p of DOC_PATHS) {
      const res = await fetch(`${base}${p}`);
      expect(res.status, p).toBe(200);
      expect(res.headers.get('content-security-policy'), p).toBe(API_DOCS_CSP);
      await res.arrayBuffer();
    }
    const csp = directives(API_DOCS_CSP);
    expect(csp.get('default-src')).toEqual(["'self'"]);
    expect(csp.get('script-src')).toEqual(["'self'"]);
    expect(csp.get('script-src-attr')).toEqual(["'none'"]);
    expect(csp.get('object-src')).toEqual(["'none'"]);
    expect(csp.get('base-uri')).toEqual(["'none'"]);
    expect(csp.get('frame-ancestors')).toEqual(["'none'"]);
    expect(csp.get('connect-src')).toEqual(["'self'"]);
    for (const [name, values] of csp) {
      expect(values.filter((v) => /^(https?:|\*)/.test(v) || (v.includes('.') && !v.startsWith("'"))), name).toEqual([]);
    }
    // The viewer's page runs only files of its own: no inline script for the CSP to allow.
    const html = await (await fetch(`${base}/api/docs/`)).text();
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.length).toBeGreaterThan(0);
    for (const [, attrs, body] of scripts) {
      expect(attrs).toMatch(/\bsrc="\.\/static\/[^"]+\.js"/);
      expect(body!.trim()).toBe('');
    }
    expect(html).not.toMatch(/\son[a-z]+=/i);
    // The document lists the API and its security scheme.
    const doc = (await (await fetch(`${base}/api/docs/json`)).json()) as { paths: Record<string, unknown>; security: unknown };
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/api/health', '/api/version', '/api/deployment/jobs']));
    expect(doc.security).toEqual([{ bearer: [] }]);
  });

  it('is served outside production by default (npm start, the tests), with its CSP', async () => {
    const base = await serve({ NODE_ENV: 'development' });
    const res = await fetch(`${base}/api/docs/json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-security-policy')).toBe(API_DOCS_CSP);
  });

  it('refuses a value of API_DOCS other than on or off, naming it', () => {
    expect(() => loadSettings({ API_DOCS: 'yes' }, { readFile: () => '' })).toThrow(ConfigError);
    expect(() => loadSettings({ API_DOCS: 'yes' }, { readFile: () => '' })).toThrow(/API_DOCS.*must be on or off/);
    expect(loadSettings({}, { readFile: () => '' }).API_DOCS).toBeUndefined();
  });
});

describe('docs/access.md', () => {
  it("holds the app's own route table, as npm run docs:access writes it", async () => {
    await serve({});
    const committed = readFileSync(path.join(ROOT, 'docs/access.md'), 'utf8');
    const table = renderAccessTable(t!.app.routeTable);
    // Every route is in it, with the access it declares.
    for (const r of t!.app.routeTable) expect(table).toContain(`| ${r.method} | \`${r.url.replace(/:([A-Za-z]+)/g, '{$1}')}\` |`);
    expect(spliceAccessTable(committed, table), 'docs/access.md differs from the route table: run `npm run docs:access`').toBe(committed);
    // The script sees the same table as the app the tests run.
    const check = spawnSync(NODE, ['--import', 'tsx', 'scripts/docs-access.ts', '--check'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(check.stderr).toBe('');
    expect(check.status).toBe(0);
    expect(check.stdout).toContain(`matches the route table (${t!.app.routeTable.length} routes)`);
  });

  it('changes when a route changes its access', () => {
    const doc = `intro\n<!-- access-table:begin (generated by \`npm run docs:access\` from the route table: do not edit) -->\nold\n<!-- access-table:end -->\noutro\n`;
    const a = spliceAccessTable(doc, renderAccessTable([{ method: 'GET', url: '/api/x/:id', access: 'viewer', sse: false, summary: 'X' }]));
    const b = spliceAccessTable(doc, renderAccessTable([{ method: 'GET', url: '/api/x/:id', access: 'admin', sse: false, summary: 'X' }]));
    expect(a).toContain('| GET | `/api/x/{id}` | `viewer` | X |');
    expect(b).toContain('| GET | `/api/x/{id}` | `admin` | X |');
    expect(a.startsWith('intro\n')).toBe(true);
    expect(a.endsWith('<!-- access-table:end -->\noutro\n')).toBe(true);
    expect(() => spliceAccessTable('no markers', 'x')).toThrow(/lacks the markers/);
  });
});
