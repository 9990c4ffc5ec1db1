// The Users page and password changes in real headless Chromium against the real backend: an
// admin adds a user, who must choose a password at first sign-in; a role change signs that user
// out at once; the last admin is kept; disabling refuses a user's sign-in until enabled again;
// reset and removal go through their dialogs; every user changes their own password.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { startTestApp, PASSWORDS, type TestApp } from '../helpers/api/app.ts';
import { ensureUiBuilt, launchChromium, newPage, shoot, signIn } from '../helpers/e2e/ui.ts';
import { verifyCredentials } from '../../src/state/users.ts';

let t: TestApp;
let base: string;
let browser: Browser;
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });

beforeAll(async () => {
  ensureUiBuilt();
  t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_MINUTE: '100' } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

const row = (page: Page, user: string) => page.locator(`tr[data-user="${user}"]`);

async function choosePassword(page: Page, current: string, next: string): Promise<void> {
  await page.getByLabel('Current password').fill(current);
  await page.getByLabel('New password', { exact: true }).fill(next);
  await page.getByLabel('New password again').fill(next);
  await page.getByRole('button', { name: 'Change password' }).click();
}

describe('users in the UI', () => {
  it('an admin adds a user, who chooses a password first; a role change signs them out at once', async () => {
    const admin = await newPage(browser);
    const lena = await newPage(browser);
    try {
      await signIn(admin.page, base, 'admin', '/users');
      await admin.page.getByRole('link', { name: 'Users' }).waitFor();
      await poll(() => admin.page.locator('tr[data-user]').count()).toBe(3);

      // Too short a first password is named before anything is sent, and refused by the API too.
      const form = admin.page.getByTestId('add-user');
      await form.getByLabel('User name').fill('lena');
      await form.getByLabel('Role').selectOption('operator');
      await form.getByLabel('First password').fill('short');
      await poll(() => admin.page.getByText('At least 12 characters.').isVisible()).toBe(true);
      await form.getByRole('button', { name: 'Add user' }).click();
      await poll(() => admin.page.getByRole('alert').first().textContent()).toContain('at least 12 characters');
      await form.getByLabel('First password').fill('lena-first-password');
      await form.getByRole('button', { name: 'Add user' }).click();
      await poll(() => admin.page.getByTestId('users-notice').textContent()).toContain('Added lena (operator)');
      await poll(() => row(admin.page, 'lena').textContent()).toContain('must choose a password');
      await shoot(admin.page, 'users', { doc: true });

      // Lena's first sign-in: the password page and nothing else.
      await lena.page.goto(`${base}/login`);
      await lena.page.getByLabel('User name').fill('lena');
      await lena.page.getByLabel('Password').fill('lena-first-password');
      await lena.page.getByRole('button', { name: 'Sign in' }).click();
      await lena.page.getByTestId('must-change').waitFor();
      expect(await lena.page.getByRole('link', { name: 'Audit trail' }).count()).toBe(0);
      await shoot(lena.page, 'choose-password', { doc: true });
      await choosePassword(lena.page, 'lena-first-password', 'lena-own-password');
      await poll(() => lena.page.getByTestId('user').textContent()).toContain('lena operator');
      expect(await verifyCredentials(t.db.database.db, 'lena', 'lena-own-password')).not.toBeNull();

      // Demoted by the admin: lena's next request is refused and she is back at sign-in.
      await row(admin.page, 'lena').getByLabel('Role of lena').selectOption('viewer');
      await poll(() => admin.page.getByTestId('users-notice').textContent()).toContain('lena is now viewer');
      // Her next request is her click, unless the page's own polling asked first: either is refused.
      const signedOut = lena.page.getByTestId('signed-out');
      await lena.page.getByRole('link', { name: 'Audit trail' }).or(signedOut).first().click();
      await signedOut.waitFor();
      expect(await lena.page.getByTestId('signed-out').textContent()).toContain('sign in again');
      await lena.page.getByLabel('User name').fill('lena');
      await lena.page.getByLabel('Password').fill('lena-own-password');
      await lena.page.getByRole('button', { name: 'Sign in' }).click();
      await poll(() => lena.page.getByTestId('user').textContent()).toContain('lena viewer');
      expect(await lena.page.getByRole('link', { name: 'Users' }).count()).toBe(0);
    } finally {
      await admin.context.close();
      await lena.context.close();
    }
  }, 120_000);

  it('keeps the last admin, disables and enables a user, and resets and removes users through their dialogs', async () => {
    const { context, page } = await newPage(browser);
    try {
      await signIn(page, base, 'admin', '/users');
      await poll(() => page.locator('tr[data-user]').count()).toBe(4);
      await row(page, 'admin').getByRole('button', { name: 'Disable' }).click();
      await poll(() => page.getByRole('alert').first().textContent()).toContain('the last admin cannot be removed, disabled or demoted');
      await row(page, 'admin').getByLabel('Role of admin').selectOption('viewer');
      await poll(() => page.getByRole('alert').first().textContent()).toContain('the last admin');
      await poll(() => row(page, 'admin').getByLabel('Role of admin').inputValue()).toBe('admin');

      // Disabling lena signs her out and refuses her sign-in; enabling her lets her back in.
      await row(page, 'lena').getByRole('button', { name: 'Disable' }).click();
      await poll(() => page.getByTestId('users-notice').textContent()).toContain('lena is disabled and signed out');
      await poll(() => row(page, 'lena').textContent()).toContain('disabled');
      // Refused exactly as a wrong password would be: the answer does not confirm the password.
      const refused = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { username: 'lena', password: 'lena-own-password' } });
      expect(refused.statusCode).toBe(401);
      expect(refused.json().message).toBe('wrong user name or password');
      await row(page, 'lena').getByRole('button', { name: 'Enable' }).click();
      await poll(() => page.getByTestId('users-notice').textContent()).toContain('lena is enabled');
      await poll(() => row(page, 'lena').getByRole('button', { name: 'Disable' }).count()).toBe(1);
      const back = await t.app.inject({ method: 'POST', url: '/api/auth/login', payload: { username: 'lena', password: 'lena-own-password' } });
      expect(back.statusCode).toBe(200);

      await row(page, 'lena').getByRole('button', { name: 'Reset password…' }).click();
      const reset = page.getByTestId('reset-password');
      await reset.getByLabel(/New password/).fill('lena-temporary-2');
      await reset.getByRole('button', { name: 'Set password' }).click();
      await poll(() => page.getByTestId('users-notice').textContent()).toContain('New password set for lena');
      await poll(() => row(page, 'lena').textContent()).toContain('must choose a password');
      expect(await verifyCredentials(t.db.database.db, 'lena', 'lena-temporary-2')).not.toBeNull();

      await row(page, 'lena').getByRole('button', { name: 'Remove…' }).click();
      await page.getByTestId('remove-user').getByRole('button', { name: 'Remove' }).click();
      await poll(() => page.getByTestId('users-notice').textContent()).toContain('Removed lena');
      await poll(() => row(page, 'lena').count()).toBe(0);
    } finally {
      await context.close();
    }
  }, 120_000);

  it('every user changes their own password, the current one required', async () => {
    const { context, page } = await newPage(browser);
    try {
      await signIn(page, base, 'viewer');
      expect(await page.getByRole('link', { name: 'Users' }).count()).toBe(0);
      await page.getByRole('link', { name: 'Password' }).click();
      await page.getByTestId('password-form').waitFor();
      await choosePassword(page, 'not-my-password', 'viewer-password-new');
      await poll(() => page.getByRole('alert').first().textContent()).toContain('the current password is wrong');
      await choosePassword(page, PASSWORDS.viewer, 'viewer-password-new');
      await page.getByTestId('password-changed').waitFor();
      // Still signed in (the answer carried a new token), and the new password is the one.
      await page.getByRole('link', { name: 'Audit trail' }).click();
      await page.waitForURL(`${base}/audit`);
      expect(await page.getByTestId('signed-out').count()).toBe(0);
      expect(await verifyCredentials(t.db.database.db, 'viewer', 'viewer-password-new')).not.toBeNull();
      expect(await verifyCredentials(t.db.database.db, 'viewer', PASSWORDS.viewer)).toBeNull();
    } finally {
      await context.close();
    }
  }, 120_000);
});
