// The platform's .env as configuration: every value masked, one revealed at a time by an admin (an
// audit row each), and changes stored as desired state until apply-config writes them.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { freshness } from '../observed-reads.ts';
import { INSTALLER_KEYS, isMaskedKey, MASK } from '../../contracts/platform-env.ts';
import { forbidden, notFound, unavailable } from '../../errors.ts';

const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

export const platformConfigRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads, requests } = app;

  // The platform's configuration is masked for everyone: a URL holds a password whatever its key is
  // called (DATABASE_URL, REDIS_URL, SENTRY_DSN). An admin reveals one value at a time, and each
  // reveal is an audit row (docs/adr/0039-actor-kinds-and-config-reveal.md).
  const configEntry = z.object({
    key: z.string(),
    value: z.string().nullable().describe(`\`${MASK}\` when the key has a value (never the value itself), null when a pending change removes it`),
    secret: z.boolean().describe('A secret by its name, or one of the installer\'s own keys (never revealed)'),
    pending: z.boolean(),
  });
  type RawEntry = { key: string; value: string | null; pending: boolean };

  /** The .env as the observer last read it, with the changes waiting for apply-config laid over it: values in clear. */
  async function configEntries(): Promise<Map<string, RawEntry>> {
    // The .env as the observer last read it (sealed in its row); a row read before the latest job
    // ended is stale, since deploy and apply-config write the file.
    const row = await reads.observed.sinceLastJob('platformEnv', freshness(app.settings).fast);
    if (!row?.data) throw unavailable('cannot read the platform .env: it has not been observed yet (no controllers answered in time)');
    if (row.data.sealed === null) throw unavailable(`cannot read the platform .env: ${row.data.error ?? 'unknown error'}`);
    const current = reads.platformConfig.observedEntries(row.data.sealed);
    const pending = await reads.platformConfig.pending();
    const byKey = new Map<string, RawEntry>();
    for (const e of current) byKey.set(e.key, { key: e.key, value: e.value, pending: false });
    for (const c of pending) byKey.set(c.key, { key: c.key, value: c.value, pending: true });
    return byKey;
  }

  app.get(
    '/api/deployment/config',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['deployment'],
        summary: "The platform's .env keys, every value masked, and changes waiting for apply-config; an admin reveals one value with POST /api/deployment/config/{key}/reveal",
        response: { 200: z.object({ entries: z.array(configEntry) }) },
      },
    },
    async () => {
      const entries = [...(await configEntries()).values()];
      return { entries: entries.map((e) => ({ key: e.key, value: e.value === null ? null : MASK, secret: isMaskedKey(e.key), pending: e.pending })) };
    },
  );

  app.post(
    '/api/deployment/config/:key/reveal',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['deployment'],
        summary: "Reveal one value of the platform's configuration (admin); recorded in the audit trail as `config-reveal`, naming the key",
        description: `The value the next apply-config writes: a pending change's, else the .env's. ${INSTALLER_KEYS.join(' and ')} are the installer's own and are never revealed (403). Answered with \`Cache-Control: no-store\`.`,
        params: z.object({ key: z.string().regex(ENV_KEY, 'must be a .env key: letters, digits and _, not starting with a digit') }),
        response: { 200: z.object({ key: z.string(), value: z.string().nullable(), pending: z.boolean() }) },
      },
    },
    async (req, reply) => {
      const { key } = req.params;
      if (INSTALLER_KEYS.includes(key)) throw forbidden(`${key} is written by the installer for the control plane and is never revealed`);
      const entry = (await configEntries()).get(key);
      if (!entry) throw notFound(`the platform's configuration has no key ${key}`);
      const actor = req.actor();
      // Recorded before the value leaves: a reveal the audit trail does not hold never happens.
      await requests.platformConfig.recordReveal(key, entry.pending, actor);
      req.log.info({ key, pending: entry.pending, actor: actor.id }, 'platform configuration value revealed');
      void reply.header('cache-control', 'no-store');
      return { key, value: entry.value, pending: entry.pending };
    },
  );

  app.put(
    '/api/deployment/config',
    {
      config: { access: 'operator' },
      schema: {
        tags: ['deployment'],
        summary: 'Change .env keys (stored encrypted as desired state); apply-config writes them and recreates the services',
        body: z
          .strictObject({
            set: z
              .record(
                z.string().regex(ENV_KEY, 'keys must be letters, digits and _ and not start with a digit'),
                z.string().max(4096, 'must be at most 4096 characters').refine((v) => !/[\r\n\0]/.test(v), 'must not contain a newline or NUL'),
              )
              .default({}),
            unset: z.array(z.string().regex(ENV_KEY, 'keys must be letters, digits and _ and not start with a digit')).max(200).default([]),
          })
          .refine((b) => Object.keys(b.set).length + b.unset.length > 0, 'name at least one key to set or unset')
          .refine((b) => Object.keys(b.set).length <= 200, 'at most 200 keys at once')
          .refine((b) => !b.unset.some((k) => k in b.set), 'a key cannot be both set and unset')
          .refine((b) => ![...Object.keys(b.set), ...b.unset].some((k) => INSTALLER_KEYS.includes(k)), {
            error: `${INSTALLER_KEYS.slice(0, -1).join(', ')} and ${INSTALLER_KEYS.at(-1)} are written by the installer on every deploy and apply-config; they cannot be set or unset here`,
          }),
        response: { 202: z.object({ pending: z.array(z.string()) }) },
      },
    },
    async (req, reply) => {
      const actor = req.actor();
      await requests.platformConfig.put(req.body.set, req.body.unset, actor.id);
      const pending = (await reads.platformConfig.pending()).map((c) => c.key);
      req.log.info({ keys: [...Object.keys(req.body.set), ...req.body.unset], actor: actor.id }, 'platform configuration change requested');
      return reply.status(202).send({ pending });
    },
  );
};
