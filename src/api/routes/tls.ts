// GET /api/tls needs no token: the sign-in page shows the certificate's fingerprint before anyone
// has signed in, so that the operator can compare it with the browser's and with the boot log.
// Every client that connects is shown the certificate anyway (docs/adr/0020-https-listeners.md).
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { TlsView } from '../../contracts/ports.ts';

export const tlsSchema = z.object({
  https: z.boolean().describe('Whether the installer serves HTTPS (HTTPS_PORT is set)'),
  certificate: z
    .object({
      source: z.enum(['operator', 'generated']).describe('operator: TLS_CERT_FILE; generated: self-signed, in the secrets volume'),
      fingerprint256: z.string().describe('SHA-256 of the certificate, as browsers show it (AB:CD:…)'),
      spkiSha256: z.string().describe('Base64 SHA-256 of the public key, for pinning clients (curl --pinnedpubkey sha256//…)'),
      subject: z.string(),
      notAfter: z.string().describe('End of validity, ISO 8601 UTC'),
      hsts: z.boolean().describe('Whether HTTPS answers carry Strict-Transport-Security'),
    })
    .nullable(),
});

/** `tls`: the HTTPS listener's certificate; null or absent, plain HTTP only. */
export const tlsRoutes: FastifyPluginAsyncZod<{ tls?: TlsView | null }> = async (app, opts) => {
  app.get(
    '/api/tls',
    {
      config: { access: 'public' },
      schema: { tags: ['system'], summary: 'The HTTPS certificate: its fingerprint to compare', response: { 200: tlsSchema } },
    },
    async () => {
      const tls = opts.tls;
      if (!tls) return { https: false, certificate: null };
      const { source, fingerprint256, spkiSha256, subject, notAfter } = tls;
      return { https: true, certificate: { source, fingerprint256, spkiSha256, subject, notAfter, hsts: source === 'operator' && app.settings.HSTS_MAX_AGE_SECONDS > 0 } };
    },
  );
};
