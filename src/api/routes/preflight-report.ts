// The preflight report (docs/adr/0054-preflight-report.md): what an update to the channel's newest
// build would do, read before it is started, by an operator in the confirm dialog and by the
// control plane alike. Made from a new observation of the channel (as the update check is), the
// engine's observed facts and the update policy's state; the checks are one pure function.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ageFields, CHANNEL_CHECK_WAIT_MS } from '../observed-reads.ts';
import { ageOf } from '../../state/observed.ts';
import { unavailable } from '../../errors.ts';
import { CHECK_LEVELS, preflightChecks, REPORT_CHECKS } from '../../contracts/preflight-report.ts';
import { signatureAnswer, signatureSchema } from '../signature-answer.ts';

const build = z.object({ digest: z.string().nullable(), version: z.string().nullable().describe('its org.opencontainers.image.version label') });

const reportSchema = z.object({
  channel: z.string().nullable(),
  current: build,
  target: build.describe("the channel's newest build, what a start would install"),
  signature: signatureSchema,
  composeDiff: z.string().nullable().describe('unified diff from the installed compose file to the one the update installs; null when they are the same or could not be read'),
  migrations: z
    .array(z.object({ name: z.string(), step: z.enum(['expand', 'contract']).describe('by the migrations check: a contract step breaks the build before it') }))
    .nullable()
    .describe("the target's migrations this database has not applied, in order; null while the target build is not read"),
  engine: z
    .object({ version: z.string(), apiVersion: z.string(), compose: z.string().nullable(), requiredApi: z.string().nullable().describe('the oldest engine API the target declares') })
    .nullable(),
  disk: z.object({ freeBytes: z.number(), backupEstimateBytes: z.number().nullable(), basis: z.string() }).nullable().describe('room for the pre-switch database backup'),
  quarantine: z.object({ outcome: z.string(), since: z.string() }).nullable(),
  policy: z.object({ mode: z.string(), decision: z.string().nullable(), detail: z.string().nullable() }),
  checks: z.array(z.object({ id: z.enum(REPORT_CHECKS), level: z.enum(CHECK_LEVELS), sentence: z.string() })).describe('each pass, warn or block, in this order'),
  blocked: z.boolean().describe('true when a check blocks: a start is refused with 409 naming it'),
  ...ageFields,
});

export const preflightReportRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads } = app;

  app.get(
    '/api/system/self-update/preflight',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['system'],
        summary: "What an update to the channel's newest build would do: digests and versions, signature, compose diff, migrations, engine, disk, quarantine, policy; each check pass, warn or block",
        response: { 200: reportSchema },
      },
    },
    async () => {
      const { row, fresh } = await reads.observed.now('channel', CHANNEL_CHECK_WAIT_MS);
      const facts = fresh && row ? await reads.selfUpdate.preflightFacts(row) : null;
      if (!row || !facts) throw unavailable(`the channel could not be observed within ${CHANNEL_CHECK_WAIT_MS / 1000} s: no observer answered (is the installer's controller running?)`);
      const c = row.data!;
      const p = c.preflight;
      const checks = preflightChecks(facts);
      return {
        channel: c.channel,
        current: facts.current,
        target: { digest: c.remoteDigest, version: p?.target?.version ?? null },
        signature: signatureAnswer(c.signature),
        composeDiff: p?.composeDiff ?? null,
        migrations: p?.target?.pendingMigrations ?? null,
        engine: 'error' in facts.engine ? null : { ...facts.engine, requiredApi: p?.target?.engineApiMin ?? null },
        disk: p && !('error' in p.disk) ? { freeBytes: p.disk.free, backupEstimateBytes: p.disk.estimate, basis: p.disk.basis } : null,
        quarantine: facts.quarantine ? { outcome: facts.quarantine.reason, since: facts.quarantine.at } : null,
        policy: facts.policy!,
        checks,
        blocked: checks.some((x) => x.level === 'block'),
        ...ageOf(row),
      };
    },
  );
};
