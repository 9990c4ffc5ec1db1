// The image's HEALTHCHECK: exits 0 only when /api/health answers ok with the database up.
const port = process.env.PORT ?? '8080';
try {
  const res = await fetch(`http://127.0.0.1:${port}/api/health`, { signal: AbortSignal.timeout(2_500) });
  const body = (await res.json()) as { status?: string; db?: string };
  process.exit(res.ok && body.status === 'ok' && body.db === 'up' ? 0 : 1);
} catch {
  process.exit(1);
}
