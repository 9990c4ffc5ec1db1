// Domain errors with codes. The API maps them to one JSON shape: {statusCode, error, message, code?}.
export type ErrorCode =
  | 'bad_request'
  | 'unauthenticated'
  | 'forbidden'
  /** Signed in, but the user must choose a new password before anything else. */
  | 'password_change_required'
  | 'not_found'
  | 'conflict'
  | 'unsupported_media_type'
  | 'payload_too_large'
  /** A client that did not send its request in time (docs/adr/0040-bounded-connections.md). */
  | 'request_timeout'
  | 'rate_limited'
  | 'unavailable'
  | 'internal';

const STATUS: Record<ErrorCode, number> = {
  bad_request: 400,
  unauthenticated: 401,
  forbidden: 403,
  password_change_required: 403,
  not_found: 404,
  conflict: 409,
  unsupported_media_type: 415,
  payload_too_large: 413,
  request_timeout: 408,
  rate_limited: 429,
  unavailable: 503,
  internal: 500,
};

export class AppError extends Error {
  readonly statusCode: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.statusCode = STATUS[code];
  }
}

export const badRequest = (m: string) => new AppError('bad_request', m);
export const unauthenticated = (m: string) => new AppError('unauthenticated', m);
export const forbidden = (m: string) => new AppError('forbidden', m);
export const notFound = (m: string) => new AppError('not_found', m);
export const conflict = (m: string) => new AppError('conflict', m);
export const unavailable = (m: string) => new AppError('unavailable', m);

export function codeForStatus(status: number): ErrorCode {
  const found = (Object.entries(STATUS) as [ErrorCode, number][]).find(([, s]) => s === status);
  if (found) return found[0];
  return status >= 500 ? 'internal' : 'bad_request';
}

// ---------------------------------------------------------------------------------------------
// Lost dependencies (docs/adr/0012-dependency-faults.md). A request that fails because the
// database cannot be reached answers 503 `unavailable`, not 500: the caller should retry.

/** Network error codes of a connection that could not be made or was lost. */
const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ENOTFOUND', 'EPIPE', 'ECONNABORTED']);

/**
 * Postgres SQLSTATEs meaning "the server is not there for you right now": class 08 (connection
 * exception), shutting down / starting up (57P01–57P03), too many connections (53300), and a
 * statement cancelled by statement_timeout (57014).
 */
const UNAVAILABLE_SQLSTATE = /^(08...|57P0[123]|53300|57014)$/;

/** Messages node-postgres gives a query whose connection was lost, never made, or timed out. */
const PG_CONNECTION_MESSAGE =
  /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Query read timeout|Client was closed and is not queryable|Connection ended|the database system is (starting up|shutting down|in recovery mode)/i;

interface ErrorLike {
  code?: unknown;
  address?: unknown;
  message?: unknown;
  errors?: unknown;
}

/**
 * True when an error says the database cannot be reached (refused, reset, timed out, restarting).
 * A failed connect to a unix socket other than Postgres's own (`.s.PGSQL.<port>`) is the Docker
 * engine's, not the database's, and does not count.
 */
export function isDatabaseUnavailable(err: unknown, depth = 0): boolean {
  if (!err || typeof err !== 'object' || depth > 3) return false;
  const e = err as ErrorLike;
  const code = typeof e.code === 'string' ? e.code : '';
  if (UNAVAILABLE_SQLSTATE.test(code)) return true;
  if (CONNECTION_CODES.has(code) || code === 'ENOENT') {
    const address = typeof e.address === 'string' ? e.address : '';
    const unixSocket = address.startsWith('/');
    if (!unixSocket && code !== 'ENOENT') return true;
    if (unixSocket && /\.s\.PGSQL\.\d+$/.test(address)) return true;
  }
  if (typeof e.message === 'string' && PG_CONNECTION_MESSAGE.test(e.message)) return true;
  // Node reports a failed connect to every address of a name as an AggregateError.
  return Array.isArray(e.errors) && e.errors.some((x) => isDatabaseUnavailable(x, depth + 1));
}

/** The one message a request gets when the database is unavailable; it names no host or detail. */
export const DATABASE_UNAVAILABLE = 'the database is unavailable; try again shortly';
