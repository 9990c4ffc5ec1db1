// The Notifications page in real headless Chromium against the real backend (no Docker engine):
// an admin adds a webhook (a bad URL is refused naming the rule; the receiver's loopback address
// is refused until the admin ticks "Allow private networks", shown on the row), sees its secret once, sends a
// test that a real local receiver gets signed with that secret, watches the delivery turn
// delivered (the page passing axe-core's serious and critical rules), disables and removes the
// webhook; a viewer is not allowed there.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createHmac } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { ensureUiBuilt, expectAccessible, launchChromium, newPage, shoot, signIn } from '../helpers/e2e/ui.ts';

let t: TestApp;
let base: string;
let browser: Browser;
let receiver: Server;
let hookUrl: string;
const got: { headers: IncomingHttpHeaders; body: string }[] = [];
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });

beforeAll(async () => {
  ensureUiBuilt();
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  hookUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/installer-events`;
  t = await startTestApp({ controllers: (w) => w.controllers.start(['notifications']), observer: false, env: { LOGIN_RATE_LIMIT_PER_MINUTE: '100' } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
  receiver?.close();
});

describe('notifications in the UI', () => {
  it('an admin adds a webhook, copies its secret, tests it, disables and removes it', async () => {
    const { page } = await newPage(browser, { bypassCSP: true });
    await signIn(page, base, 'admin', '/notifications');
    await page.getByRole('heading', { name: 'Notifications' }).waitFor();
    await page.getByText('No webhook yet.').waitFor();

    const form = page.getByTestId('add-webhook');
    await form.getByLabel('URL').fill('ftp://files.example.com/drop');
    await form.getByRole('button', { name: 'Add webhook' }).click();
    await poll(() => page.getByRole('alert').first().textContent()).toContain('url must use http or https, not ftp');

    // The receiver listens on loopback: refused, naming the rule, until private networks are allowed.
    await form.getByLabel('URL').fill(hookUrl);
    await form.getByRole('button', { name: 'Add webhook' }).click();
    await poll(() => page.getByRole('alert').first().textContent()).toContain('127.0.0.1 is a loopback address');
    await form.getByLabel('Allow private networks').check();
    await form.getByRole('button', { name: 'Add webhook' }).click();
    const secret = (await page.getByTestId('secret-value').textContent())!.trim();
    expect(secret).toMatch(/^whsec_[0-9a-f]{64}$/);
    const row = page.locator(`tr[data-webhook="${hookUrl}"]`);
    await poll(() => row.textContent()).toContain('enabled');
    await poll(() => row.getByTestId('webhook-network').textContent()).toBe('private networks allowed');
    await page.getByRole('button', { name: 'I have stored it' }).click();
    expect(await page.getByTestId('webhook-secret').count()).toBe(0);
    // Gone for good: a reload shows no secret anywhere.
    await page.reload();
    await row.waitFor();
    expect(await page.content()).not.toContain(secret);

    await row.getByRole('button', { name: 'Send test' }).click();
    await poll(() => page.getByTestId('notifications-notice').textContent()).toContain('A test event is queued');
    await poll(() => got.length).toBe(1);
    const hit = got[0]!;
    expect(hit.headers['x-installer-event']).toBe('test');
    const stamp = String(hit.headers['x-installer-timestamp']);
    expect(hit.headers['x-installer-signature']).toBe(`t=${stamp},v1=${createHmac('sha256', secret).update(`${stamp}.${hit.body}`).digest('hex')}`);
    const delivery = page.locator(`tr[data-delivery="${String(hit.headers['x-installer-delivery'])}"]`);
    await poll(() => delivery.textContent(), 20_000).toContain('delivered');
    await shoot(page, 'notifications', { doc: true });
    await expectAccessible(page, 'notifications');

    // The allowance cannot be taken back while the URL needs it: the page says why.
    await row.getByRole('button', { name: 'Public only' }).click();
    await poll(() => page.getByRole('alert').first().textContent()).toContain('unless an admin sets allowPrivateNetwork');
    await poll(() => row.getByTestId('webhook-network').textContent()).toBe('private networks allowed');

    await row.getByRole('button', { name: 'Disable' }).click();
    await poll(() => page.getByTestId('notifications-notice').textContent()).toContain('is disabled');
    await poll(() => row.textContent()).toContain('disabled');
    await row.getByRole('button', { name: 'Send test' }).click();
    await poll(() => page.getByTestId('notifications-notice').textContent()).toContain('it waits until the webhook is enabled');
    await poll(() => page.locator('tr[data-delivery]').count()).toBe(2);
    expect(got.length).toBe(1);

    await row.getByRole('button', { name: 'Remove…' }).click();
    await page.getByTestId('remove-webhook').getByRole('button', { name: 'Remove' }).click();
    await poll(() => page.getByTestId('notifications-notice').textContent()).toContain('Removed the webhook');
    await page.getByText('No webhook yet.').waitFor();
    const audit = await t.db.database.db.selectFrom('deployment_actions').select('detail').where('kind', '=', 'webhook').execute();
    expect(audit).toHaveLength(5);
    expect(audit.map((a) => a.detail).find((d) => d?.startsWith('added webhook'))).toContain('private network allowed');
  });

  it('a viewer has no Notifications link and is not allowed on the page', async () => {
    const { page } = await newPage(browser);
    await signIn(page, base, 'viewer', '/notifications');
    await page.getByRole('heading', { name: 'Not allowed' }).waitFor();
    expect(await page.getByRole('link', { name: 'Notifications' }).count()).toBe(0);
  });
});
