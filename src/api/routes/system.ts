// The installer updating itself: the check (digests, compose file, last outcome) and the start.
// The start writes a request (refused with 409 inside the database when an update is in flight or a
// deployment job is queued or running) and waits, bounded, for the self-update controller to record
// how preflight ended (docs/adr/0010-self-update.md).
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ageFields, CHANNEL_CHECK_WAIT_MS } from '../observed-reads.ts';
import { ageOf } from '../../state/observed.ts';
import { failedTargetWarning, PREFLIGHT_ENDED, type SelfUpdateView } from '../../state/self-update.ts';
import { AppError, badRequest, conflict, unavailable } from '../../errors.ts';
import { INSTANCE_HEADER } from '../../contracts/instance.ts';
import { signatureAnswer, signatureSchema } from '../signature-answer.ts';
import { platformRuntimeSchema } from '../swarm-schema.ts';

const lastUpdateSchema = z.object({
  status: z.string().nullable().describe('started, completed, rolled-back, neither or undecided; null if never updated'),
  detail: z.string().nullable(),
  at: z.string().nullable(),
  targetDigest: z.string().nullable(),
  jobId: z.string().nullable().describe('the update\'s job: its transcript replays at /api/deployment/jobs/{jobId}/logs'),
});

const checkSchema = z.object({
  updateAvailable: z.boolean(),
  currentDigest: z.string().nullable(),
  remoteDigest: z.string().nullable(),
  composeChanged: z.boolean().nullable(),
  error: z.string().optional(),
  warning: z.string().optional().describe('present when the remote digest is the build the last update tried and did not keep (it rolled back)'),
  lastUpdate: lastUpdateSchema,
  signature: signatureSchema,
  platformRuntime: platformRuntimeSchema,
  ...ageFields,
});

const startSchema = z.object({
  started: z.boolean(),
  targetDigest: z.string(),
  message: z.string(),
  jobId: z.string().nullable().optional().describe('the update\'s job: its transcript at /api/deployment/jobs/{jobId}/logs'),
});

/** How long a request may wait to be claimed before it is withdrawn (no controller is running). */
const CLAIM_TIMEOUT_MS = 10_000;
const POLL_MS = 100;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const systemRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads, requests, settings } = app;

  app.get(
    '/api/system/self-update-check',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['system'],
        summary: "Whether a newer build exists on the installer's channel, whether the compose file changed, and the last update's outcome",
        response: { 200: checkSchema },
      },
    },
    async () => {
      // A new observation of the channel for every check, shared with the checks arriving with it:
      // the API touches no registry, engine or compose file itself (docs/adr/0023-observed-state.md),
      // and what it answers is never older than the question (docs/adr/0049-live-update-check.md).
      const [{ row, fresh }, last] = await Promise.all([reads.observed.now('channel', CHANNEL_CHECK_WAIT_MS), reads.selfUpdate.last()]);
      if (!fresh) {
        // Nothing answered in time: what an older observation said is not served as the answer.
        const installer = await reads.observed.current('installer');
        return {
          updateAvailable: false,
          currentDigest: installer?.data?.digest ?? null,
          remoteDigest: null,
          composeChanged: null,
          error: `the channel could not be observed within ${CHANNEL_CHECK_WAIT_MS / 1000} s: no observer answered (is the installer's controller running?)`,
          lastUpdate: last,
          signature: { policy: row?.data?.signature?.policy ?? 'off', result: null, detail: 'nothing was checked: the channel could not be observed', refused: false },
          platformRuntime: settings.PLATFORM_RUNTIME,
          ...ageOf(row),
        };
      }
      const { currentDigest, remoteDigest, composeChanged, errors, signature } = row!.data!;
      const warning = failedTargetWarning(last, remoteDigest);
      return {
        // The observer decided it when it wrote the row (its UpdateAvailable condition).
        updateAvailable: row!.conditions.find((c) => c.type === 'UpdateAvailable')?.status === 'True',
        currentDigest,
        remoteDigest,
        composeChanged,
        ...(errors.length ? { error: errors.join('; ') } : {}),
        ...(warning ? { warning } : {}),
        lastUpdate: last,
        signature: signatureAnswer(signature),
        platformRuntime: settings.PLATFORM_RUNTIME,
        ...ageOf(row),
      };
    },
  );

  app.post(
    '/api/system/self-update',
    {
      // Any signed-in caller, the service token (with x-actor-* headers) included.
      config: { access: 'viewer' },
      schema: {
        tags: ['system'],
        summary: 'Update the installer to the newest build of its channel; answers once preflight has passed and the helper runs',
        response: { 200: startSchema, 202: startSchema },
      },
    },
    async (req, reply) => {
      // The process being replaced names itself, as in GET /api/health: the overlay then knows a
      // switch that finished before its first poll (docs/adr/0034-restart-seen-by-instance.md).
      void reply.header(INSTANCE_HEADER, app.instance);
      const actor = req.actor();
      const requestId = await requests.selfUpdate.request(actor);
      req.log.info({ requestId, actor: actor.id }, 'self-update requested');

      const started = Date.now();
      const limit = settings.SELF_UPDATE_PREFLIGHT_TIMEOUT_SECONDS * 1000;
      let view: SelfUpdateView | undefined;
      for (;;) {
        view = await reads.selfUpdate.get(requestId);
        if (!view || PREFLIGHT_ENDED.includes(view.phase)) break;
        const waited = Date.now() - started;
        if (view.phase === 'requested' && waited >= CLAIM_TIMEOUT_MS) {
          const detail = `no self-update controller claimed the request within ${CLAIM_TIMEOUT_MS / 1000} s; nothing was changed`;
          if (await requests.selfUpdate.withdrawUnclaimed(requestId, detail)) throw unavailable(`self-update not started: ${detail}`);
          continue;
        }
        if (waited >= limit) {
          return reply.status(202).send({
            started: true,
            targetDigest: view.targetDigest ?? '',
            jobId: view.jobId,
            message: `preflight is still running after ${Math.round(waited / 1000)} s (${view.state ?? view.phase}); the outcome will show in lastUpdate of GET /api/system/self-update-check`,
          });
        }
        await sleep(POLL_MS);
      }
      if (!view) throw new AppError('internal', 'the self-update request vanished');
      const target = view.targetDigest ?? '';
      switch (view.phase) {
        case 'newest':
          return { started: false, targetDigest: target, jobId: view.jobId, message: `The installer already runs the newest build of channel ${view.channel}; no update was started.` };
        case 'unresolved':
          throw badRequest(`${view.detail ?? 'the target digest cannot be resolved'}; nothing was changed`);
        case 'aborted':
          if (view.abortCode === 'conflict') throw conflict(`self-update not started: ${view.detail}`);
          throw unavailable(`self-update aborted in preflight: ${view.detail}`);
        default:
          return {
            started: true,
            targetDigest: target,
            jobId: view.jobId,
            message:
              `Preflight passed; installer-self-updater is switching the installer to ${view.targetTag} (${target}). ` +
              'The installer restarts: expect about one to three minutes without a connection. The platform stack is not touched.',
          };
      }
    },
  );
};
