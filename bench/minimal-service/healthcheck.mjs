// The container's healthcheck, in the installer's style: one request to /api/health.
fetch('http://127.0.0.1:8080/api/health', { signal: AbortSignal.timeout(2500) })
  .then((r) => process.exit(r.ok ? 0 : 1))
  .catch(() => process.exit(1));
