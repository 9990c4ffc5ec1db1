// One error shape for every failure: {statusCode, error, message, code}. 5xx never leak internals.
import type { FastifyInstance, FastifyError } from 'fastify';
import { STATUS_CODES } from 'node:http';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import { AppError, codeForStatus, DATABASE_UNAVAILABLE, isDatabaseUnavailable } from '../errors.ts';

export interface ErrorBody {
  statusCode: number;
  error: string;
  message: string;
  code: string;
}

export function errorBody(statusCode: number, message: string, code = codeForStatus(statusCode)): ErrorBody {
  return { statusCode, error: STATUS_CODES[statusCode] ?? 'Error', message, code };
}

/** One entry of fastify-type-provider-zod's validation list: a zod issue, flattened. */
interface ValidationEntry {
  keyword?: string;
  instancePath?: string;
  message?: string;
  params?: { issues?: { message?: string }[] };
}

function describeZodIssues(err: FastifyError): string {
  const where = err.validationContext ?? 'request';
  const entries = (err.validation ?? []) as unknown as ValidationEntry[];
  return entries
    .slice(0, 5)
    .map((v) => {
      const p = (v.instancePath ?? '').replace(/^\//, '').replaceAll('/', '.');
      // A bad record key carries its reason one level down.
      const nested = v.keyword === 'invalid_key' ? v.params?.issues?.[0]?.message : undefined;
      return `${where}${p ? `.${p}` : ''}: ${nested ? `key ${nested}` : (v.message ?? 'invalid')}`;
    })
    .join('; ');
}

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, req, reply) => {
    let body: ErrorBody;
    if (err instanceof AppError) {
      body = errorBody(err.statusCode, err.message, err.code);
    } else if (hasZodFastifySchemaValidationErrors(err)) {
      body = errorBody(400, describeZodIssues(err), 'bad_request');
    } else if (err.validation) {
      body = errorBody(400, `${err.validationContext ?? 'request'}: ${err.message}`, 'bad_request');
    } else if (isResponseSerializationError(err)) {
      req.log.error({ err, url: req.url }, 'response did not match its schema');
      body = errorBody(500, 'Internal Server Error', 'internal');
    } else if (isDatabaseUnavailable(err)) {
      // Postgres restarting, refusing or timing out: retryable, so 503 (docs/adr/0012-dependency-faults.md).
      req.log.warn({ code: (err as { code?: unknown }).code, url: req.url, reason: err.message }, 'database unavailable');
      body = errorBody(503, DATABASE_UNAVAILABLE, 'unavailable');
    } else if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
      // Fastify's own client errors: bad JSON, wrong content type, body too large, …
      body = errorBody(err.statusCode, err.message);
    } else {
      req.log.error({ err, url: req.url }, 'request failed');
      const status = typeof err.statusCode === 'number' && err.statusCode >= 500 ? err.statusCode : 500;
      body = errorBody(status, status === 503 ? 'Service Unavailable' : 'Internal Server Error');
    }
    if (body.statusCode >= 500 && err instanceof AppError) req.log.warn({ code: err.code }, err.message);
    void reply.status(body.statusCode).send(body);
  });

  app.setNotFoundHandler((req, reply) => {
    // The path is echoed shortened: an answer must not grow with whatever a client sends.
    const p = req.url.split('?')[0] ?? '';
    const shown = p.length > 200 ? `${p.slice(0, 200)}… (${p.length} characters)` : p;
    void reply.status(404).send(errorBody(404, `Route ${req.method} ${shown} not found`, 'not_found'));
  });
}
