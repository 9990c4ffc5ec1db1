// The API client: the bearer token lives in sessionStorage (gone when the tab closes); a 401 from
// any call clears it and sends the user to sign-in.
import type { ContainerView as Container } from '../../contracts/ports.ts';
import type { ActorKind } from '../../contracts/audit.ts';
import type { Condition } from '../../contracts/conditions.ts';
import type { ReportCheck } from '../../contracts/preflight-report.ts';
import type { PlatformRuntime, SwarmObservation } from '../../contracts/swarm.ts';

export type Role = 'viewer' | 'operator' | 'admin';
const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2 };

export interface Me {
  kind: 'user' | 'service';
  username: string;
  /** Who vouches for the caller; audit rows record the same kind. */
  actorKind?: ActorKind;
  role: Role;
  /** A user whose password someone else chose must choose their own before anything else. */
  mustChangePassword?: boolean;
}

export const hasRole = (me: Me | null, least: Role): boolean => !!me && RANK[me.role] >= RANK[least];

const TOKEN_KEY = 'installer.token';

export const session = {
  token: (): string | null => sessionStorage.getItem(TOKEN_KEY),
  set: (token: string): void => sessionStorage.setItem(TOKEN_KEY, token),
  clear: (): void => sessionStorage.removeItem(TOKEN_KEY),
};

/**
 * Signs the token out on the server, so that a copy of it stops working too, then forgets it. A
 * failure (the installer unreachable, the token already refused) still forgets it here.
 */
export async function signOut(): Promise<void> {
  const token = session.token();
  session.clear();
  if (!token) return;
  try {
    await fetch('/api/auth/logout', { method: 'POST', headers: { authorization: `Bearer ${token}` }, cache: 'no-store', keepalive: true });
  } catch {
    // nothing more to do: the token expires on its own
  }
}

let unauthorized: (message: string) => void = () => {};
/** Called (once per 401) after the token is dropped; the app sends the user to sign-in. */
export function onUnauthorized(fn: (message: string) => void): void {
  unauthorized = fn;
}

export function signalUnauthorized(message: string): void {
  session.clear();
  unauthorized(message);
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

export function authHeaders(extra: Record<string, string> = {}): Record<string, string> {
  const token = session.token();
  return token ? { authorization: `Bearer ${token}`, ...extra } : { ...extra };
}

async function errorOf(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`;
  let code: string | null = null;
  try {
    const body = (await res.json()) as { message?: string; code?: string };
    if (body.message) message = body.message;
    code = body.code ?? null;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(res.status, message, code);
}

/** fetch with the token; throws ApiError for any non-2xx answer (a 401 also signs out). */
export async function request(path: string, init: { method?: string; json?: unknown; signal?: AbortSignal; headers?: Record<string, string> } = {}): Promise<Response> {
  const headers = authHeaders(init.headers);
  if (init.json !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, {
      method: init.method ?? 'GET',
      headers,
      ...(init.json !== undefined ? { body: JSON.stringify(init.json) } : {}),
      ...(init.signal ? { signal: init.signal } : {}),
      cache: 'no-store',
    });
  } catch (err) {
    if ((err as Error).name === 'AbortError') throw err;
    throw new ApiError(0, `the installer did not answer (${(err as Error).message})`, 'network');
  }
  if (res.ok) return res;
  const err = await errorOf(res);
  if (res.status === 401 && path !== '/api/auth/login') signalUnauthorized(err.message);
  throw err;
}

/** Downloads an attachment the API serves (with the token) under the name the server gives it. */
export async function download(path: string, fallbackName: string): Promise<{ name: string; bytes: number }> {
  const res = await request(path);
  const name = /filename="([^"]+)"/.exec(res.headers.get('content-disposition') ?? '')?.[1] ?? fallbackName;
  const blob = await res.blob();
  const href = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = href;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 60_000);
  return { name, bytes: blob.size };
}

export async function api<T>(path: string, init: Parameters<typeof request>[1] = {}): Promise<T> {
  const res = await request(path, init);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

// ---- shapes the UI reads (see the OpenAPI document at /api/docs/json) ----------------------

export interface Job {
  jobId: string;
  kind: string;
  services: string[];
  targetJobId?: string;
  actor: string;
  phase: 'queued' | 'running' | 'completed' | 'failed';
  state: string | null;
  detail: string | null;
  exitCode: number | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  hungDeadline: string | null;
  cancelRequestedBy: string | null;
  /** 1, bumped by a cancel. */
  generation: number;
  /** The generation the jobs controller last acted on; null until it looked. */
  observedGeneration: number | null;
  conditions: Condition[];
}

export interface PlatformStatus {
  project: string;
  containers: Container[];
  engineError?: string;
  /** Absent from a backend that predates it: compose. */
  runtime?: PlatformRuntime;
  /** With runtime swarm: the nodes, the stack's services and tasks; or why they could not be read. */
  swarm?: SwarmObservation;
  swarmError?: string;
  running: Job[];
  queued: Job[];
  lastActions: Record<string, { status: string; actor: string; at: string; exitCode: number | null; detail: string | null }>;
}

export interface LastUpdate {
  status: string | null;
  detail: string | null;
  at: string | null;
  targetDigest: string | null;
  /** The update's job: its transcript (absent from a backend that predates it). */
  jobId?: string | null;
}

export interface SelfUpdateCheck {
  updateAvailable: boolean;
  currentDigest: string | null;
  remoteDigest: string | null;
  composeChanged: boolean | null;
  error?: string;
  /** The remote build is the one the last update tried and did not keep. */
  warning?: string;
  lastUpdate?: LastUpdate;
  /** The remote build's signature (absent from a backend that predates it). */
  signature?: SignatureCheck;
  /** Where the platform runs (absent from a backend that predates it). */
  platformRuntime?: PlatformRuntime;
}

export interface SignatureCheck {
  policy: 'off' | 'warn' | 'require';
  result: string | null;
  detail: string;
  keyId?: string;
  /** An update to the remote build would be aborted in preflight (require, not verified). */
  refused: boolean;
}

/** GET /api/system/self-update/preflight (docs/adr/0054-preflight-report.md). */
export interface PreflightReport {
  current: { digest: string | null; version: string | null };
  target: { digest: string | null; version: string | null };
  composeDiff: string | null;
  migrations: { name: string; step: 'expand' | 'contract' }[] | null;
  checks: ReportCheck[];
  blocked: boolean;
}

export interface SelfUpdateStart {
  started: boolean;
  targetDigest: string;
  message: string;
  /** The update's job: its transcript, shown once the overlay reloads (absent from an older backend). */
  jobId?: string | null;
}

/** A started update as the UI keeps it: the answer's body, and the process that gave the answer. */
export interface StartedUpdate extends SelfUpdateStart {
  /** Its `x-installer-instance` header, the process being replaced; null when it sent none (an older backend). */
  replacing: string | null;
}

export interface VersionInfo {
  inContainer: boolean;
  image: string | null;
  tag: string | null;
  digest: string | null;
  note?: string;
}

export interface MigrateInfo {
  vmUser: string | null;
  platformUrlSet: boolean;
  scriptPath: string;
  lastJob: { jobId: string; phase: string; detail: string | null; createdAt: string } | null;
}

// The chart, audit-row and container shapes are the API's own (GET /api/machines,
// /api/deployment/actions, the status and logs endpoints), imported as types only.
export type { ChartNode, ChartEdge, ChartInstance, ChartView as Chart, ActionView as Action } from '../../contracts/ports.ts';
export type { Container };

export type { ContainerLogLine as LogLine } from '../../contracts/ports.ts';
export type { Condition };
export type { UpdateHistoryEntry } from '../../contracts/update-history.ts';

export type UpdatePolicyMode = 'manual' | 'notify' | 'auto';
export const WEEK_DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;
export type WeekDay = (typeof WEEK_DAYS)[number];

/** GET /api/system/update-policy (docs/update-policy.md). */
export interface UpdatePolicy {
  mode: UpdatePolicyMode;
  window: { days: WeekDay[]; startHour: number; endHour: number };
  generation: number;
  updatedBy: string | null;
  updatedAt: string;
  status: {
    observedGeneration: number;
    decision: string | null;
    detail: string | null;
    decidedAt: string | null;
    availableDigest: string | null;
    availableSince: string | null;
    lastAttempt: { digest: string; at: string; requestId: string | null } | null;
  };
}

/** GET /api/system/quarantine: builds the policy never starts again. */
export interface QuarantineEntry {
  digest: string;
  outcome: string;
  detail: string | null;
  requestId: string | null;
  since: string;
  liftedAt: string | null;
  liftedBy: string | null;
}
