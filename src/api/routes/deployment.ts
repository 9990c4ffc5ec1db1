// Platform actions as desired-state requests, their job streams, the audit trail and the status.
// Routes write requests and read state; the jobs controller does the work (architecture.md).
import type { FastifyReply } from 'fastify';
import { Readable } from 'node:stream';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ageFields, freshness } from '../observed-reads.ts';
import { ageOf, readFresh } from '../../state/observed.ts';
import { createJob, getJob, lastJobEnd, listJobs, type JobView } from '../../state/jobs.ts';
import { requestJobCancel } from '../../state/cancel-requests.ts';
import { actionExists, AuditTrailPages, lastActionOfEachKind, listActionsPage, type ActionFilter, type ActionRow } from '../../state/actions.ts';
import { ACTION_KINDS, ACTION_STATUSES, ACTOR_KINDS, type ActionKind, type ActionStatus, type ActorKind } from '../../contracts/audit.ts';
import { parseInstant } from './logs.ts';
import { csvLine } from '../csv.ts';
import type { JobEventRecord } from '../../state/job-events.ts';
import type { ActionView } from '../../contracts/ports.ts';
import { JOB_KIND_NAMES, JOB_KINDS, REQUESTABLE_KINDS } from '../../contracts/job-kinds.ts';
import { putConfigChanges, pendingConfigChanges, recordConfigReveal } from '../../state/platform-config.ts';
import { INSTALLER_KEYS, isMaskedKey, MASK } from '../../contracts/platform-env.ts';
import { badRequest, forbidden, notFound, unavailable } from '../../errors.ts';
import { limitParam } from '../limit-param.ts';
import { openStreams } from '../open-streams.ts';

export const ACTIONS_LIMIT = { default: 50, max: 500 };
const SERVICE_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/;
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

const jobSchema = z.object({
  jobId: z.string(),
  kind: z.enum(JOB_KIND_NAMES),
  services: z.array(z.string()),
  targetJobId: z.string().optional(),
  actor: z.string(),
  phase: z.enum(['queued', 'running', 'completed', 'failed']),
  state: z.string().nullable().describe('Current state of the job chart'),
  detail: z.string().nullable(),
  exitCode: z.number().nullable(),
  createdAt: z.string(),
  startedAt: z.string().nullable(),
  finishedAt: z.string().nullable(),
  hungDeadline: z.string().nullable(),
  cancelRequestedBy: z.string().nullable(),
});

const iso = (d: Date | null) => (d ? d.toISOString() : null);
const viewJob = (j: JobView): z.infer<typeof jobSchema> => ({
  jobId: j.jobId,
  kind: j.kind,
  services: j.params.services ?? [],
  ...(j.params.targetJobId ? { targetJobId: j.params.targetJobId } : {}),
  actor: j.actor,
  phase: j.phase,
  state: j.state,
  detail: j.detail,
  exitCode: j.exitCode,
  createdAt: j.createdAt.toISOString(),
  startedAt: iso(j.startedAt),
  finishedAt: iso(j.finishedAt),
  hungDeadline: iso(j.hungDeadline),
  cancelRequestedBy: j.cancelRequestedBy,
});

const jobIdParams = z.object({ jobId: z.uuid({ error: 'must be a job id (a UUID)' }) });
const accepted = z.object({ jobId: z.string(), kind: z.string(), status: z.literal('queued') });

const limitQuery = limitParam(ACTIONS_LIMIT, 'Rows');

// The audit rows as sent; `satisfies` ties the type the UI reads (ActionView) to this schema.
const actionList = z.array(
  z.object({
    id: z.string(), kind: z.string(), status: z.string(), exitCode: z.number().nullable(), actor: z.string(),
    actorEmail: z.string().nullable(),
    actorKind: z.enum(ACTOR_KINDS).nullable().describe('Who vouched for the actor: a local user, a person the control plane forwarded (actor `platform:<id>`), the control plane itself, or the installer; null on rows written before kinds were recorded'),
    detail: z.string().nullable(), targetDigest: z.string().nullable(),
    schemaMigration: z.string().nullable(), jobId: z.string().nullable(), createdAt: z.string(), finishedAt: z.string().nullable(),
  }),
) satisfies z.ZodType<ActionView[]>;

// Filters and the cursor of the audit trail (docs/adr/0021-audit-filters-and-export.md). Kinds are
// one parameter, a comma list: a repeated parameter is refused like every other one.
const KIND_LIST = new RegExp(`^(${ACTION_KINDS.join('|')})(,(${ACTION_KINDS.join('|')}))*$`);
const ACTOR_KIND_LIST = new RegExp(`^(${ACTOR_KINDS.join('|')})(,(${ACTOR_KINDS.join('|')}))*$`);
const BIGINT_MAX = 2n ** 63n - 1n;
const isoParam = (what: string) =>
  z
    .string()
    .refine((v) => parseInstant(v) !== null, 'must be an ISO 8601 date-time such as 2024-05-01T10:00:00Z')
    .optional()
    .describe(`${what}, ISO 8601 (inclusive); no offset means UTC`);
const actionFilters = {
  actor: z
    .string()
    .regex(/^[^\p{Cc}]{1,200}$/u, 'must be 1-200 characters without control characters')
    .optional()
    .describe('Only rows of this actor (exact match; a person the control plane forwarded is `platform:<id>`)'),
  actorKind: z
    .string()
    .regex(ACTOR_KIND_LIST, `must be one or more of ${ACTOR_KINDS.join(', ')}, separated by commas`)
    .optional()
    .describe(`Only rows whose actor is of these kinds, a comma list (${ACTOR_KINDS.join(', ')})`),
  kind: z
    .string()
    .regex(KIND_LIST, `must be one or more of ${ACTION_KINDS.join(', ')}, separated by commas`)
    .optional()
    .describe(`Only rows of these kinds, a comma list (${ACTION_KINDS.join(', ')})`),
  status: z.enum(ACTION_STATUSES, { error: `must be one of ${ACTION_STATUSES.join(', ')}` }).optional().describe('Only rows in this status'),
  since: isoParam('Only rows created at or after this time'),
  until: isoParam('Only rows created at or before this time'),
  before: z
    .string()
    .regex(/^\d{1,19}$/, 'must be the id of an audit row (a positive integer)')
    // zod runs the refinement after a failed pattern too: BigInt() only sees digits.
    .refine((v) => /^\d{1,19}$/.test(v) && BigInt(v) > 0n && BigInt(v) <= BIGINT_MAX, 'must be the id of an audit row (a positive integer)')
    .optional()
    .describe('Cursor: only rows older than the row with this id (as the `Link: rel="next"` header gives it)'),
};
type FilterQuery = { [K in keyof typeof actionFilters]?: string };

/** An instant from parseInstant (epoch nanoseconds) as a timestamptz literal, to microseconds (what Postgres keeps). */
function instantLiteral(ns: bigint, round: 'up' | 'down'): string {
  const us = ns / 1000n + (round === 'up' && ns % 1000n !== 0n ? 1n : 0n);
  const iso = new Date(Number(us / 1000n)).toISOString(); // …ss.mmmZ
  return `${iso.slice(0, -1)}${String(us % 1000n).padStart(3, '0')}Z`;
}

/** The filter a query names; since/until as literals rounded so that both ends stay inclusive. */
function filterOf(q: FilterQuery): ActionFilter {
  const since = q.since === undefined ? undefined : parseInstant(q.since)!;
  const until = q.until === undefined ? undefined : parseInstant(q.until)!;
  if (since !== undefined && until !== undefined && since > until) throw badRequest('since: must not be later than until');
  return {
    ...(q.actor !== undefined ? { actor: q.actor } : {}),
    ...(q.kind !== undefined ? { kinds: [...new Set(q.kind.split(','))] as ActionKind[] } : {}),
    ...(q.actorKind !== undefined ? { actorKinds: [...new Set(q.actorKind.split(','))] as ActorKind[] } : {}),
    ...(q.status !== undefined ? { status: q.status as ActionStatus } : {}),
    ...(since !== undefined ? { since: instantLiteral(since, 'up') } : {}),
    ...(until !== undefined ? { until: instantLiteral(until, 'down') } : {}),
  };
}

const filtered = (q: FilterQuery) => Object.keys(actionFilters).some((k) => q[k as keyof FilterQuery] !== undefined);

/** The `Link` header to the next older page: the same filters and limit, `before` the page's last row. */
function nextLink(q: FilterQuery & { limit: number }, before: string | null): string | null {
  if (before === null) return null;
  const params = new URLSearchParams({ limit: String(q.limit) });
  for (const k of ['actor', 'actorKind', 'kind', 'status', 'since', 'until'] as const) if (q[k] !== undefined) params.set(k, q[k]);
  params.set('before', before);
  return `</api/deployment/actions?${params.toString()}>; rel="next"`;
}

// The actor's kind is the last column: it came after the others, and a program reading the file
// by position keeps finding every earlier column where it was.
const CSV_COLUMNS = ['id', 'createdAt', 'finishedAt', 'actor', 'actorEmail', 'kind', 'status', 'exitCode', 'detail', 'jobId', 'targetDigest', 'schemaMigration', 'actorKind'] as const;
/** Rows per query of an export: each is a short keyset read, so an export holds no connection while the client reads. */
const CSV_BATCH = 1000;
const csvRow = (r: ActionRow) => csvLine(CSV_COLUMNS.map((c) => (c === 'id' ? String(r.id) : r[c])));

function parseSeq(raw: string | undefined, name: string): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (!/^\d{1,15}$/.test(raw)) throw badRequest(`${name}: must be a non-negative integer event sequence number`);
  return Number(raw);
}

/** How often a job stream reads the log without being woken: covers notifications lost while the listener reconnects. */
const STREAM_POLL_MS = 2_000;

export const deploymentRoutes: FastifyPluginAsyncZod = async (app) => {
  const { database, events, platform } = app.deps;
  const db = database.db;
  // Rendered pages of the audit trail: checked against the response schema once per read, then
  // reused by every caller for AUDIT_CACHE_MS (docs/adr/0014-audit-trail-reads.md).
  const renderActions = (rows: ActionRow[]) => JSON.stringify(actionList.parse(rows.map((r) => ({ ...r, id: String(r.id) }))));
  const auditPages = new AuditTrailPages(db, renderActions, app.deps.settings.AUDIT_CACHE_MS);
  // Open job streams, each by the function that ends it: a self-update's job ends only once the
  // next backend is up, so its stream would hold the stopping one for the whole drain.
  const jobStreams = openStreams<() => void>(app, (end) => end());

  async function checkServices(services: string[] | undefined): Promise<string[]> {
    if (!services?.length) return [];
    // The service list as the observer last read it from the compose file (refreshed when stale).
    const row = await readFresh(db, 'platform', freshness(app.deps.settings).fast);
    const known = row?.data?.services;
    if (!known) {
      throw unavailable(`cannot read the platform's services: ${row?.data?.servicesError ?? 'the platform has not been observed yet'}`);
    }
    const unknown = services.filter((s) => !known.includes(s));
    if (unknown.length) {
      throw badRequest(`unknown service${unknown.length > 1 ? 's' : ''}: ${unknown.join(', ')} (the platform has: ${known.join(', ') || 'none'})`);
    }
    return [...new Set(services)];
  }

  app.post(
    '/api/deployment/jobs',
    {
      config: { access: 'operator' },
      schema: {
        tags: ['deployment'],
        summary: 'Request a platform action; answered 202 with the jobId to follow',
        // Strict: a misspelled field (`service` for `services`) must not act on the whole platform.
        body: z.strictObject({
          action: z.enum(REQUESTABLE_KINDS),
          services: z.array(z.string().regex(SERVICE_NAME, 'must be a compose service name')).max(50).optional(),
        }),
        response: { 202: accepted },
      },
    },
    async (req, reply) => {
      const { action } = req.body;
      if (req.body.services?.length && !JOB_KINDS[action].takesServices) throw badRequest(`services: ${action} acts on the whole platform and takes no services`);
      const services = await checkServices(req.body.services);
      const jobId = await createJob(db, { kind: action, params: services.length ? { services } : {}, actor: req.actor() });
      return reply.status(202).send({ jobId, kind: action, status: 'queued' as const });
    },
  );

  app.post(
    '/api/deployment/jobs/:jobId/cancel',
    {
      config: { access: 'operator' },
      schema: {
        tags: ['deployment'],
        summary: 'Cancel a queued or running job (a cancel-job request; the cancelled job ends failed)',
        params: jobIdParams,
        response: { 202: accepted.extend({ targetJobId: z.string() }) },
      },
    },
    async (req, reply) => {
      const jobId = await requestJobCancel(db, req.params.jobId, req.actor());
      return reply.status(202).send({ jobId, kind: 'cancel-job', status: 'queued' as const, targetJobId: req.params.jobId });
    },
  );

  app.get(
    '/api/deployment/jobs',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['deployment'],
        summary: 'Recent jobs, newest first',
        querystring: z.object({ limit: limitQuery }),
        response: { 200: z.array(jobSchema) },
      },
    },
    async (req) => (await listJobs(db, { limit: req.query.limit })).map(viewJob),
  );

  app.get(
    '/api/deployment/jobs/:jobId',
    { config: { access: 'viewer' }, schema: { tags: ['deployment'], summary: 'One job and its status', params: jobIdParams, response: { 200: jobSchema } } },
    async (req) => {
      const job = await getJob(db, req.params.jobId);
      if (!job) throw notFound(`no job ${req.params.jobId}`);
      return viewJob(job);
    },
  );

  app.get(
    '/api/deployment/jobs/:jobId/logs',
    {
      config: { access: 'viewer' },
      sse: 'only',
      schema: {
        tags: ['deployment'],
        summary: "SSE stream of a job's events: replays from the start, after `after=<seq>` or after Last-Event-ID, then follows live; ends after `finished`",
        params: jobIdParams,
        querystring: z.object({ after: z.string().optional().describe('Replay events after this sequence number (a non-negative integer)') }),
        // Loose: the validated object replaces request.headers, and every other header must stay.
        headers: z.looseObject({ 'last-event-id': z.string().optional().describe('Resume after this sequence number (as `after`)') }),
      },
    },
    async (req, reply) => {
      const jobId = req.params.jobId;
      const after = parseSeq(req.query.after, 'after');
      const lastId = parseSeq(req.headers['last-event-id'], 'Last-Event-ID');
      if (!(await getJob(db, jobId))) throw notFound(`no job ${jobId}`);
      // Commit the stream now: the client knows it is connected, and heartbeats start even
      // while a job is quiet (the plugin starts them with the headers).
      reply.sse.sendHeaders();
      reply.raw.flushHeaders();
      let cursor = Math.max(after ?? 0, lastId ?? 0);

      // Woken when the job's events are stored (here or, through NOTIFY, in the controllers'
      // process); rows are always read from the log after the cursor, so nothing is skipped or sent
      // twice. A slow poll covers notifications missed while the listener reconnects.
      let signalled = false;
      let wake: (() => void) | null = null;
      let closed = false;
      const unsubscribe = events.subscribe(jobId, (seq) => {
        if (seq <= cursor) return;
        signalled = true;
        wake?.();
      });
      const end = () => {
        closed = true;
        wake?.();
      };
      jobStreams.add(end);
      reply.sse.onClose(() => {
        jobStreams.delete(end);
        end();
      });
      const message = (e: JobEventRecord) => ({
        id: String(e.seq),
        event: e.type,
        data: { seq: e.seq, type: e.type, at: e.at.toISOString(), ...e.payload },
      });

      async function* stream() {
        try {
          while (!closed) {
            signalled = false;
            const page = await events.read(jobId, cursor);
            for (const e of page) {
              cursor = e.seq;
              yield message(e);
              if (e.type === 'finished') return;
            }
            if (page.length || signalled || closed) continue;
            await new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, STREAM_POLL_MS);
              wake = () => {
                clearTimeout(timer);
                resolve();
              };
            });
            wake = null;
          }
        } finally {
          unsubscribe();
        }
      }
      await reply.sse.send(stream());
    },
  );

  app.get(
    '/api/deployment/actions',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['deployment'],
        summary: `The audit trail, newest first (limit default ${ACTIONS_LIMIT.default}, at most ${ACTIONS_LIMIT.max})`,
        description:
          'Filters combine with AND. When older rows exist, a `Link: <…>; rel="next"` header gives the URL of the next page (same filters, `before` = the id of the last row); follow it until it is absent. The body is the same array of rows with or without filters.',
        querystring: z.object({ limit: limitQuery, ...actionFilters }),
        response: { 200: actionList },
      },
    },
    // The unfiltered newest page comes rendered (checked against actionList when it was read):
    // bytes with a JSON content type are sent as they are, past the serializer, which the typed
    // reply does not model. A fresh page is sent at once; otherwise the read (or the one in flight)
    // is awaited. Filtered and cursor reads go to the database every time.
    (req, reply) => {
      const r = (reply as FastifyReply).type('application/json; charset=utf-8');
      const q = req.query;
      const sendPage = (body: Buffer | string, before: string | null) => {
        const link = nextLink(q, before);
        if (link) r.header('link', link);
        r.send(body);
      };
      if (filtered(q)) {
        return (async () => {
          const filter = filterOf(q);
          if (q.before !== undefined && !(await actionExists(db, q.before))) throw badRequest(`before: no audit row has id ${q.before}`);
          const rows = await listActionsPage(db, filter, { ...(q.before !== undefined ? { before: q.before } : {}), limit: q.limit + 1 });
          const page = rows.slice(0, q.limit);
          sendPage(renderActions(page), rows.length > q.limit ? String(page.at(-1)!.id) : null);
        })();
      }
      const ready = auditPages.ready(q.limit);
      if (ready) {
        sendPage(ready, auditPages.nextBefore(ready));
        return;
      }
      return auditPages.json(q.limit).then((body) => {
        sendPage(body, auditPages.nextBefore(body));
      });
    },
  );

  app.get(
    '/api/deployment/actions.csv',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['deployment'],
        summary: 'The audit trail as a CSV file: every row matching the filters, newest first',
        description:
          '`text/csv` attachment `audit-trail-<time>.csv`: a header line, then one record per row (RFC 4180 quoting, CRLF line ends). A text cell starting with = + - @, a tab or a carriage return gets a leading apostrophe, so a spreadsheet shows it instead of evaluating it. Same filters as `GET /api/deployment/actions`, no limit.',
        querystring: z.object(actionFilters),
      },
    },
    async (req, reply) => {
      const q = req.query;
      const filter = filterOf(q);
      if (q.before !== undefined && !(await actionExists(db, q.before))) throw badRequest(`before: no audit row has id ${q.before}`);
      // The first batch is read before the answer starts: a database that is down gets a 503, not a cut file.
      const first = await listActionsPage(db, filter, { ...(q.before !== undefined ? { before: q.before } : {}), limit: CSV_BATCH });
      async function* lines() {
        yield csvLine(CSV_COLUMNS);
        let batch = first;
        for (;;) {
          let chunk = '';
          for (const row of batch) chunk += csvRow(row);
          if (chunk) yield chunk;
          if (batch.length < CSV_BATCH) return;
          batch = await listActionsPage(db, filter, { before: String(batch.at(-1)!.id), limit: CSV_BATCH });
        }
      }
      const name = `audit-trail-${new Date().toISOString().replace(/\.\d+Z$/, 'Z').replaceAll(':', '-')}.csv`;
      return reply
        .header('content-type', 'text/csv; charset=utf-8; header=present')
        .header('content-disposition', `attachment; filename="${name}"`)
        .header('cache-control', 'no-store')
        .header('x-content-type-options', 'nosniff')
        .send(Readable.from(lines(), { objectMode: true }));
    },
  );

  app.get(
    '/api/deployment/status',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['deployment'],
        summary: "The platform's containers, running and queued jobs, and the last action of each kind",
        response: {
          200: z.object({
            project: z.string(),
            containers: z.array(z.object({ name: z.string(), service: z.string(), state: z.string(), health: z.string().nullable(), image: z.string(), digest: z.string().nullable(), since: z.string().nullable() })),
            engineError: z.string().optional(),
            running: z.array(jobSchema),
            queued: z.array(jobSchema),
            lastActions: z.record(z.string(), z.object({ status: z.string(), actor: z.string(), at: z.string(), exitCode: z.number().nullable(), detail: z.string().nullable() })),
            ...ageFields,
          }),
        },
      },
    },
    async () => {
      // The containers as the observer last saw them; a row observed before the latest job ended is
      // stale too, so a client that waited for its job then reads the job's result.
      const row = await readFresh(db, 'platform', { ...freshness(app.deps.settings).fast, notBefore: await lastJobEnd(db) });
      const containers = row?.data?.containers ?? [];
      const engineError = row ? row.data?.engineError : 'the platform has not been observed yet: no observer answered in time';
      const active = await listJobs(db, { limit: 200, phases: ['queued', 'running'] });
      const last = await lastActionOfEachKind(db);
      return {
        project: platform.project,
        containers,
        ...(engineError ? { engineError } : {}),
        running: active.filter((j) => j.phase === 'running').map(viewJob),
        queued: active.filter((j) => j.phase === 'queued').reverse().map(viewJob),
        lastActions: Object.fromEntries(
          last.map((a) => [a.kind as ActionKind, { status: a.status, actor: a.actor, at: new Date(a.created_at).toISOString(), exitCode: a.exit_code, detail: a.detail }]),
        ),
        ...ageOf(row),
      };
    },
  );

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
    const row = await readFresh(db, 'platformEnv', { ...freshness(app.deps.settings).fast, notBefore: await lastJobEnd(db) });
    if (!row?.data) throw unavailable('cannot read the platform .env: it has not been observed yet (no controllers answered in time)');
    if (row.data.sealed === null) throw unavailable(`cannot read the platform .env: ${row.data.error ?? 'unknown error'}`);
    const current = JSON.parse(app.deps.sealer.open(row.data.sealed)) as { key: string; value: string }[];
    const pending = await pendingConfigChanges(db, app.deps.sealer);
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
      await recordConfigReveal(db, key, entry.pending, actor);
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
      await putConfigChanges(db, app.deps.sealer, req.body.set, req.body.unset, actor.id);
      const pending = (await pendingConfigChanges(db, app.deps.sealer)).map((c) => c.key);
      req.log.info({ keys: [...Object.keys(req.body.set), ...req.body.unset], actor: actor.id }, 'platform configuration change requested');
      return reply.status(202).send({ pending });
    },
  );
};
