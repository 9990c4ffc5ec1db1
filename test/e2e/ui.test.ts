// The operator UI in real headless Chromium against the real backend on the rig: a test platform
// of compose services, the jobs controller running, the UI served by the backend at `/`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Browser } from 'playwright-core';
import { TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { docker, REGISTRY, retryOnSharedEngine, run, type PlatformProject } from '../helpers/e2e/rig.ts';
import { newPage, shoot, signIn, useToken } from '../helpers/e2e/ui.ts';
import { startUiOnPlatform, type UiOnPlatform } from '../helpers/e2e/ui-platform.ts';
import { finishJob } from '../../src/state/jobs.ts';

let p: PlatformProject;
let t: TestApp;
let base: string;
let browser: Browser;
let ui: UiOnPlatform | undefined;
const pullImage = `${REGISTRY}/platform-test/ui-busybox:${randomBytes(4).toString('hex')}`;
/** Retries until the value matches: pages load and streams arrive in their own time. */
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });

beforeAll(async () => {
  ui = await startUiOnPlatform({ controllers: true, env: { LOGIN_RATE_LIMIT_PER_MINUTE: '100', PLATFORM_URL: 'https://platform.example.test' } });
  ({ p, t, base, browser } = ui);
});
afterAll(async () => {
  await ui?.close();
  await run('docker', ['rmi', '-f', pullImage]);
});

describe('operator UI', () => {
  it('is served at / with index.html for app paths, while /api keeps its JSON and its auth', async () => {
    const root = await fetch(`${base}/`);
    expect(root.status).toBe(200);
    expect(root.headers.get('content-type')).toContain('text/html');
    expect(root.headers.get('content-security-policy')).toContain("default-src 'self'");
    const html = await root.text();
    const deep = await fetch(`${base}/jobs/00000000-0000-0000-0000-000000000000`);
    expect(deep.status).toBe(200);
    expect(await deep.text()).toBe(html);
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html)![1]!;
    const js = await fetch(`${base}${asset}`);
    expect(js.status).toBe(200);
    expect(js.headers.get('cache-control')).toContain('immutable');
    expect((await fetch(`${base}/assets/nope-123.js`)).status).toBe(404);
    // No network at run time: the bundle loads nothing from elsewhere.
    expect(html).not.toMatch(/https?:\/\//);
    // An unknown /api path is no route: a 404 carrying only the path, with or without a token.
    const unknownApi = await fetch(`${base}/api/nope`);
    expect(unknownApi.status).toBe(404);
    expect(((await unknownApi.json()) as { code: string }).code).toBe('not_found');
    const authed = await fetch(`${base}/api/nope`, { headers: { authorization: `Bearer ${await t.token('viewer')}` } });
    expect(authed.status).toBe(404);
    expect(((await authed.json()) as { code: string }).code).toBe('not_found');
    expect((await fetch(`${base}/api/deployment/status`)).status).toBe(401);
  });

  it('signs in, refuses a bad password, and sends a 401 back to sign-in', async () => {
    const { context, page } = await newPage(browser);
    try {
      await page.goto(`${base}/audit`);
      await page.waitForURL(/\/login\?next=%2Faudit/);
      await page.getByLabel('User name').fill('operator');
      await page.getByLabel('Password').fill('not the password');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await poll(() => page.getByTestId('login-error').textContent()).toBe('Wrong user name or password.');
      await shoot(page, 'sign-in', { doc: true });
      await page.getByLabel('Password').fill('operator-password-1');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(`${base}/audit`);
      await poll(() => page.getByTestId('user').textContent()).toContain('operator');
      // The token lives in sessionStorage; a token the server refuses sends the user back.
      expect(await page.evaluate(() => sessionStorage.getItem('installer.token'))).toMatch(/^ey/);
      await page.evaluate(() => sessionStorage.setItem('installer.token', 'expired.or.forged'));
      await page.getByRole('link', { name: 'Status' }).click();
      await page.waitForURL(/\/login\?next=/);
      expect(await page.evaluate(() => sessionStorage.getItem('installer.token'))).toBeNull();
      await poll(() => page.getByTestId('signed-out').textContent()).toContain('Sign in again');
    } finally {
      await context.close();
    }
  });

  it("shows the test platform's containers with state and health; a viewer gets no action buttons", async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      await page.goto(`${base}/`);
      const rows = page.getByTestId('containers').locator('tbody tr');
      await poll(() => rows.count()).toBe(3);
      for (const service of ['db', 'web', 'worker']) {
        const row = page.locator(`tr[data-container="${p.project}-${service}-1"]`);
        await poll(() => row.textContent()).toContain('running');
        await poll(() => row.textContent(), 30_000).toContain('healthy');
      }
      expect(await page.getByTestId('actions').count()).toBe(0);
      expect(await page.locator('button[data-action]').count()).toBe(0);
      await poll(() => page.getByTestId('read-only').textContent()).toContain('viewer');
      // Admin-only navigation is not offered either.
      expect(await page.getByRole('link', { name: 'Host migration' }).count()).toBe(0);
      // Run as a process, the installer cannot replace itself: the status page says so, and how to try it.
      await poll(() => page.getByTestId('self-update-unavailable').textContent()).toContain('runs as a process');
      expect(await page.getByTestId('self-update-unavailable').textContent()).toContain('bash scripts/try-self-update.sh');
    } finally {
      await context.close();
    }
  });

  it('runs a restart as an operator: confirmation, then the live output to finished', async () => {
    const { context, page } = await newPage(browser);
    try {
      await signIn(page, base, 'operator');
      await page.getByTestId('containers').locator('tbody tr').first().waitFor();
      await poll(() => page.locator('button[data-action]').count()).toBe(7);
      await shoot(page, 'status', { doc: true });
      await page.getByLabel('worker').check();
      await page.locator('button[data-action="restart"]').click();
      const dialog = page.getByTestId('confirm-action');
      await poll(() => dialog.textContent()).toContain('worker');
      await shoot(page, 'confirm-restart', { doc: true });
      await dialog.getByRole('button', { name: 'Restart' }).click();
      await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/);
      const jobId = page.url().split('/').pop()!;
      await poll(() => page.getByTestId('job-finished').textContent(), 120_000).toContain('completed');
      const out = page.getByTestId('job-output');
      const text = (await out.textContent())!;
      expect(text).toContain('started restart worker');
      expect(text).toContain('restart worker');
      expect(text).toContain('finished: completed');
      // The page shows exactly the stored events, once each, in order.
      const seqs = await out.locator('[data-seq]').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq'))));
      const stored = await t.db.database.db.selectFrom('deployment_job_events').select(['seq', 'type']).where('job_id', '=', jobId).orderBy('seq').execute();
      expect(seqs).toEqual(stored.filter((e) => e.type !== 'progress').map((e) => e.seq));
      await poll(() => page.getByTestId('stream-state').textContent()).toBe('finished');
      await poll(() => page.getByTestId('job-exit').textContent()).toBe('0');
      // The status row's conditions, as the API serves them: no longer at work, and it succeeded.
      const conditions = page.getByTestId('job-conditions');
      await poll(() => conditions.locator('[data-condition="Succeeded"]').getAttribute('data-status')).toBe('True');
      expect(await conditions.locator('[data-condition="Progressing"]').getAttribute('data-status')).toBe('False');
      expect(await conditions.textContent()).toContain('Succeeded=True');
      expect(await page.getByTestId('cancel-job').count()).toBe(0);
      await shoot(page, 'job', { doc: true });
    } finally {
      await context.close();
    }
  });

  it('resumes a dropped job stream with Last-Event-ID: no line lost, none repeated', async () => {
    const jobs = (await (await fetch(`${base}/api/deployment/jobs`, { headers: { authorization: `Bearer ${await t.token('viewer')}` } })).json()) as { jobId: string; kind: string }[];
    const jobId = jobs.find((j) => j.kind === 'restart')!.jobId;
    const stored = await t.db.database.db.selectFrom('deployment_job_events').select(['seq', 'type']).where('job_id', '=', jobId).orderBy('seq').execute();
    expect(stored.length).toBeGreaterThanOrEqual(4);
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      // The first connection breaks off after two events (the proxy between drops it); later ones pass.
      const seen: { lastEventId: string | null }[] = [];
      await page.route(`**/api/deployment/jobs/${jobId}/logs`, async (route) => {
        seen.push({ lastEventId: route.request().headers()['last-event-id'] ?? null });
        if (seen.length > 1) return route.continue();
        const full = await route.fetch();
        const body = await full.text();
        const blocks = body.split('\n\n').filter((b) => /^id: /m.test(b));
        await route.fulfill({ status: 200, headers: { 'content-type': 'text/event-stream' }, body: `${blocks.slice(0, 2).join('\n\n')}\n\n` });
      });
      await page.goto(`${base}/jobs/${jobId}`);
      await poll(() => page.getByTestId('stream-state').textContent()).toBe('finished');
      expect(seen).toEqual([{ lastEventId: null }, { lastEventId: '2' }]);
      const seqs = await page.getByTestId('job-output').locator('[data-seq]').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq'))));
      expect(seqs).toEqual(stored.filter((e) => e.type !== 'progress').map((e) => e.seq));
    } finally {
      await context.close();
    }
  });

  it('shows a pull from the registry as progress bars', async () => {
    // A fresh image with a layer of its own, in the registry but not on the engine, so the pull downloads.
    const ctx = mkdtempSync(path.join(tmpdir(), 'ui-pull-'));
    writeFileSync(path.join(ctx, 'Dockerfile'), 'FROM installer-rig/busybox:latest\nCOPY blob /blob\n');
    writeFileSync(path.join(ctx, 'blob'), randomBytes(4 * 1024 * 1024));
    await retryOnSharedEngine(`building ${pullImage}`, async () => {
      await docker(['build', '-q', '-t', pullImage, ctx], { env: { DOCKER_BUILDKIT: '0' } });
      await docker(['push', pullImage]);
    });
    await docker(['rmi', pullImage]);
    appendFileSync(path.join(p.dir, '.env'), `PLATFORM_IMAGE=${pullImage}\n`);
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('operator'));
      await page.goto(`${base}/`);
      await page.getByLabel('worker').check();
      // Pull is not destructive: no confirmation.
      await page.locator('button[data-action="pull"]').click();
      await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/);
      await poll(() => page.getByTestId('job-finished').textContent(), 120_000).toContain('completed');
      const bars = page.getByTestId('pull-progress').locator('.progress-row');
      expect(await bars.count()).toBeGreaterThan(0);
      const values = await bars.locator('progress').evaluateAll((els) => els.map((e) => (e as unknown as { value: number }).value));
      expect(values.some((v) => v === 100)).toBe(true);
      expect(await page.getByTestId('pull-progress').textContent()).toMatch(/Pull complete|Pulled/);
      await shoot(page, 'job-pull', { doc: true });
    } finally {
      await context.close();
    }
  });

  it('lists the audit trail newest first with actor, kind, status, exit code and detail', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      await page.goto(`${base}/audit`);
      const rows = page.getByTestId('audit').locator('tbody tr');
      await rows.first().waitFor();
      // Each cell's text; the actor's without the label of its kind, which is read apart.
      const cells = await rows.evaluateAll((trs) =>
        trs.map((tr) =>
          [...tr.querySelectorAll('td')].map((td) => {
            const text = td.textContent ?? '';
            const label = td.querySelector('.actor-kind')?.textContent ?? '';
            return label && text.endsWith(label) ? text.slice(0, -label.length) : text;
          }),
        ),
      );
      const kinds = await rows.evaluateAll((trs) => trs.map((tr) => tr.querySelector('td[data-actor-kind]')?.getAttribute('data-actor-kind') ?? null));
      const api = (await (await fetch(`${base}/api/deployment/actions`, { headers: { authorization: `Bearer ${await t.token('viewer')}` } })).json()) as {
        kind: string;
        actor: string;
        actorKind: string | null;
        status: string;
        createdAt: string;
      }[];
      expect(cells.length).toBe(api.length);
      expect(cells[0]!.slice(1, 4)).toEqual([api[0]!.actor, api[0]!.kind, api[0]!.status]);
      expect(kinds).toEqual(api.map((a) => a.actorKind ?? ''));
      expect(cells.some((c) => c[2] === 'restart' && c[3] === 'completed' && c[1] === 'operator' && c[4] === '0')).toBe(true);
      const times = cells.map((c) => c[0]!);
      expect([...times].sort().reverse()).toEqual(times);
      await shoot(page, 'audit', { doc: true });
      // Diagnostics are an admin's: a viewer is not offered them.
      expect(await page.getByTestId('download-diagnostics').count()).toBe(0);
    } finally {
      await context.close();
    }
  });

  it('lets an admin download the diagnostics bundle from the audit page, without any secret in it', async () => {
    const { context, page } = await newPage(browser, { acceptDownloads: true });
    try {
      await useToken(context, await t.token('admin'));
      await page.goto(`${base}/audit`);
      const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-diagnostics').click()]);
      expect(download.suggestedFilename()).toMatch(/^installer-diagnostics-\d{4}-\d\d-\d\dT[0-9-]+Z\.json$/);
      const body = readFileSync((await download.path())!, 'utf8');
      const bundle = JSON.parse(body) as { platform: { project: string; containers: { name: string }[] }; jobs: { recent: unknown[] } };
      expect(bundle.platform.project).toBe(p.project);
      expect(bundle.platform.containers.map((c) => c.name)).toContain(`${p.project}-web-1`);
      expect(bundle.jobs.recent.length).toBeGreaterThan(0);
      for (const secret of Object.values(TEST_SECRETS)) expect(body).not.toContain(secret);
      await poll(() => page.getByTestId('diagnostics-done').textContent()).toMatch(/^Downloaded installer-diagnostics-.*\(\d+ bytes\)$/);
    } finally {
      await context.close();
    }
  });

  it('draws each state chart and highlights the state the chosen actor is in', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      await page.goto(`${base}/machines`);
      for (const id of ['job', 'hostMigration', 'selfUpdate', 'bootReconcile']) await page.getByTestId(`chart-${id}`).waitFor();
      // The restart above ended in the job chart's `completed` state.
      const job = page.getByTestId('chart-job');
      await poll(() => job.locator('g.state.current').getAttribute('data-state-id')).toBe('job.completed');
      expect(await job.locator('g.state.current').count()).toBe(1);
      expect(await page.getByTestId('current-job').textContent()).toBe('completed');
      // Every state of the chart is drawn.
      const ids = await job.locator('[data-state-id]').evaluateAll((els) => els.map((e) => e.getAttribute('data-state-id')));
      expect(ids.sort()).toEqual(['job.cancelled', 'job.completed', 'job.failed', 'job.hung', 'job.preparing', 'job.preparing.watching', 'job.running', 'job.running.watching', 'job.starting'].sort());
      // Nothing to reconcile on this boot.
      await poll(() => page.getByTestId('chart-bootReconcile').locator('g.state.current').getAttribute('data-state-id')).toBe('bootReconcile.idle');
      await shoot(page, 'machines', { doc: true, fullPage: false });
    } finally {
      await context.close();
    }
  });

  it('highlights a nested state: a running job in running.watching', async () => {
    // A status row as the jobs controller leaves it mid-step (real restarts are over in a second).
    // Marked running from the start, so the controller never claims it; ended afterwards.
    const db = t.db.database.db;
    const jobId = randomUUID();
    await db.insertInto('deployment_jobs').values({ job_id: jobId, kind: 'pull', params: JSON.stringify({ services: ['web'] }), actor: 'operator', actor_email: null, cancel_requested_by: null, cancel_requested_at: null }).execute();
    await db
      .insertInto('deployment_job_status')
      .values({
        job_id: jobId, phase: 'running', conditions: '[]', snapshot: JSON.stringify({ status: 'active', value: { running: 'watching' } }), chart_version: '1', claimed_by: 'ui-test',
        started_at: new Date(), finished_at: null, exit_code: null, detail: null, last_output_at: null, hung_deadline: null, runner_pid: null,
      })
      .execute();
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      await page.goto(`${base}/machines`);
      const job = page.getByTestId('chart-job');
      // The running actor is chosen by default.
      await poll(() => page.getByTestId('instances-job').inputValue()).toBe(jobId);
      await poll(() => job.locator('g.current').evaluateAll((els) => els.map((e) => e.getAttribute('data-state-id')))).toEqual(['job.running', 'job.running.watching']);
      expect(await page.getByTestId('current-job').textContent()).toBe('running.watching');
      // What it can do next, the hung guard among it.
      const next = (await job.locator('.transitions').textContent()) ?? '';
      expect(next).toContain('after hungTimeout');
      expect(next).toContain('CANCEL');
      await shoot(page, 'machines-running', { doc: true });
    } finally {
      await context.close();
      await finishJob(db, jobId, { phase: 'failed', detail: 'ended by the UI test', exitCode: null });
    }
  });

  it("a cancel shows on the job page as asked for, then as seen by the controller once its status answers it", async () => {
    // Marked running from the start, so no chart of this process runs it: the cancel waits for its end.
    const db = t.db.database.db;
    const jobId = randomUUID();
    await db.insertInto('deployment_jobs').values({ job_id: jobId, kind: 'pull', params: JSON.stringify({ services: ['web'] }), actor: 'operator', actor_email: null, cancel_requested_by: null, cancel_requested_at: null }).execute();
    await db.insertInto('deployment_job_status').values({ job_id: jobId, phase: 'running', conditions: '[]', observed_generation: 1, claimed_by: 'ui-test', started_at: new Date() }).execute();
    const { context, page } = await newPage(browser);
    try {
      await signIn(page, base, 'operator', `/jobs/${jobId}`);
      await page.getByTestId('cancel-job').click();
      await page.getByTestId('confirm-cancel').getByRole('button', { name: 'Cancel job' }).click();
      await poll(() => page.getByTestId('job-cancel').textContent()).toBe('requested by operator, not yet seen by the controller');
      await finishJob(db, jobId, { phase: 'failed', state: 'cancelled', detail: 'cancelled by operator', exitCode: null });
      await poll(() => page.getByTestId('job-cancel').textContent()).toBe('requested by operator, seen by the controller');
      expect(await page.getByTestId('job-conditions').locator('[data-condition="Succeeded"]').getAttribute('data-status')).toBe('False');
    } finally {
      await context.close();
      await finishJob(db, jobId, { phase: 'failed', detail: 'ended by the UI test', exitCode: null });
    }
  });

  it('host migration page (admin): sets the VM user and shows the rule for a bad one', async () => {
    const { context, page } = await newPage(browser);
    try {
      await signIn(page, base, 'admin', '/migrate');
      await page.waitForURL(`${base}/migrate`);
      await poll(() => page.getByTestId('vm-user-current').textContent()).toBe('not set');
      const input = page.getByRole('textbox', { name: 'VM user' });
      await input.fill('Bad User');
      await poll(() => input.getAttribute('aria-invalid')).toBe('true');
      await page.getByRole('button', { name: 'Save' }).click();
      await poll(() => page.getByRole('alert').first().textContent()).toContain('POSIX user name');
      await input.fill('ubuntu');
      await page.getByRole('button', { name: 'Save' }).click();
      await poll(() => page.getByTestId('vm-user-saved').textContent()).toBe('VM user set to ubuntu by admin.');
      await poll(() => page.getByTestId('vm-user-current').textContent()).toBe('ubuntu');
      expect(await page.getByTestId('run-migration').isEnabled()).toBe(true);
      await shoot(page, 'migrate', { doc: true });
      await page.getByTestId('run-migration').click();
      const dialog = page.getByTestId('confirm-migration');
      expect(await dialog.getByRole('button', { name: 'Run it' }).isDisabled()).toBe(true);
      await dialog.getByRole('textbox').fill('migrate');
      expect(await dialog.getByRole('button', { name: 'Run it' }).isEnabled()).toBe(true);
      await shoot(page, 'migrate-confirm');
      await dialog.getByRole('button', { name: 'Cancel' }).click();
      // An operator is not offered the page.
      const other = await newPage(browser);
      try {
        await useToken(other.context, await t.token('operator'));
        await other.page.goto(`${base}/migrate`);
        await poll(() => other.page.locator('main').textContent()).toContain('needs the admin role');
        expect(await other.page.getByRole('link', { name: 'Host migration' }).count()).toBe(0);
      } finally {
        await other.context.close();
      }
    } finally {
      await context.close();
    }
  });
});
