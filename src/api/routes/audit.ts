// The audit trail: pages with filters and a cursor, and the CSV export
// (docs/adr/0014-audit-trail-reads.md, docs/adr/0021-audit-filters-and-export.md).
import type { FastifyReply } from 'fastify';
import { Readable } from 'node:stream';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ActionFilter, ActionRow } from '../../state/actions.ts';
import { ACTION_KINDS, ACTION_STATUSES, ACTOR_KINDS, type ActionKind, type ActionStatus, type ActorKind } from '../../contracts/audit.ts';
import type { ActionView } from '../../contracts/ports.ts';
import { parseInstant } from './logs.ts';
import { csvLine } from '../csv.ts';
import { badRequest } from '../../errors.ts';
import { LIST_LIMIT, limitParam } from '../limit-param.ts';

const limitQuery = limitParam(LIST_LIMIT, 'Rows');

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

export const auditRoutes: FastifyPluginAsyncZod = async (app) => {
  // Rendered pages of the audit trail: checked against the response schema once per read, then
  // reused by every caller for AUDIT_CACHE_MS (docs/adr/0014-audit-trail-reads.md).
  const renderActions = (rows: ActionRow[]) => JSON.stringify(actionList.parse(rows.map((r) => ({ ...r, id: String(r.id) }))));
  // Pages are read again when any process writes the trail (NOTIFY on its channel).
  const auditPages = app.reads.audit.pages(renderActions, app.settings.AUDIT_CACHE_MS);
  const { exists, page: readPage } = app.reads.audit;

  app.get(
    '/api/deployment/actions',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['deployment'],
        summary: `The audit trail, newest first (limit default ${LIST_LIMIT.default}, at most ${LIST_LIMIT.max})`,
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
          if (q.before !== undefined && !(await exists(q.before))) throw badRequest(`before: no audit row has id ${q.before}`);
          const rows = await readPage(filter, { ...(q.before !== undefined ? { before: q.before } : {}), limit: q.limit + 1 });
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
      if (q.before !== undefined && !(await exists(q.before))) throw badRequest(`before: no audit row has id ${q.before}`);
      // The first batch is read before the answer starts: a database that is down gets a 503, not a cut file.
      const first = await readPage(filter, { ...(q.before !== undefined ? { before: q.before } : {}), limit: CSV_BATCH });
      async function* lines() {
        yield csvLine(CSV_COLUMNS);
        let batch = first;
        for (;;) {
          let chunk = '';
          for (const row of batch) chunk += csvRow(row);
          if (chunk) yield chunk;
          if (batch.length < CSV_BATCH) return;
          batch = await readPage(filter, { before: String(batch.at(-1)!.id), limit: CSV_BATCH });
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
};
