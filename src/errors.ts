// Domain errors with codes. The API maps them to one JSON shape: {statusCode, error, message, code?}.
export type ErrorCode =
  | 'bad_request'
  | 'unauthenticated'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'unsupported_media_type'
  | 'payload_too_large'
  | 'rate_limited'
  | 'unavailable'
  | 'internal';

const STATUS: Record<ErrorCode, number> = {
  bad_request: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  unsupported_media_type: 415,
  payload_too_large: 413,
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
