// Signing in as the generated first admin. The installer makes that user choose a password at the
// first sign-in (docs/adr/0016-user-management.md); tests choose `<generated>-chosen`, and later
// sign-ins (the same test process, or a restarted installer on the same database) use it.

/** The password tests choose for the generated admin. */
export const chosenPassword = (generated: string): string => `${generated}-chosen`;

const chosen = new Set<string>();

async function signIn(baseUrl: string, password: string): Promise<{ status: number; token?: string; mustChange?: boolean; text: string }> {
  const res = await fetch(`${baseUrl}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', password }) });
  const text = await res.text();
  if (res.status !== 200) return { status: res.status, text };
  const body = JSON.parse(text) as { token: string; user: { mustChangePassword?: boolean } };
  return { status: 200, token: body.token, mustChange: body.user.mustChangePassword === true, text };
}

/** A token of the generated `admin`, choosing its password first when the installer asks for that. */
export async function firstAdminToken(baseUrl: string, generated: string): Promise<string> {
  if (chosen.has(generated)) {
    const again = await signIn(baseUrl, chosenPassword(generated));
    if (again.token) return again.token;
  }
  const first = await signIn(baseUrl, generated);
  if (first.status === 401 && !chosen.has(generated)) {
    // Chosen by an earlier test process on this database.
    const again = await signIn(baseUrl, chosenPassword(generated));
    if (again.token) return (chosen.add(generated), again.token);
  }
  if (!first.token) throw new Error(`login as admin failed: ${first.status} ${first.text}`);
  if (!first.mustChange) return first.token;
  const res = await fetch(`${baseUrl}/api/auth/password`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${first.token}` },
    body: JSON.stringify({ currentPassword: generated, newPassword: chosenPassword(generated) }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`choosing the first admin's password failed: ${res.status} ${text}`);
  chosen.add(generated);
  return (JSON.parse(text) as { token: string }).token;
}
