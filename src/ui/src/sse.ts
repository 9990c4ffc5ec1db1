// Server-sent events over fetch, so that the request carries the Authorization header
// (EventSource cannot send one). A follower reconnects after a dropped connection and sends
// Last-Event-ID, so a job stream resumes after the last event it delivered: nothing lost, and the
// consumer drops anything at or below the last id it saw, so nothing is shown twice.
import { authHeaders, signalUnauthorized } from './api.ts';

export interface SseEvent {
  id: string | null;
  event: string;
  data: string;
}

/** Parses an event-stream body (https://html.spec.whatwg.org/#event-stream-interpretation). */
export async function* readEventStream(body: ReadableStream<Uint8Array>, onRetry?: (ms: number) => void): AsyncGenerator<SseEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let id: string | null = null;
  let event = '';
  let data: string[] = [];
  let sawData = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let m: RegExpExecArray | null;
      const eol = /\r\n|\r|\n/g;
      let start = 0;
      while ((m = eol.exec(buffer))) {
        // A lone \r at the very end may be half of \r\n: wait for more.
        if (m[0] === '\r' && m.index === buffer.length - 1) break;
        const line = buffer.slice(start, m.index);
        start = m.index + m[0].length;
        if (line === '') {
          if (sawData) yield { id, event: event || 'message', data: data.join('\n') };
          event = '';
          data = [];
          sawData = false;
          continue;
        }
        if (line.startsWith(':')) continue; // comment: heartbeat
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value2 = colon < 0 ? '' : line.slice(colon + 1);
        if (value2.startsWith(' ')) value2 = value2.slice(1);
        if (field === 'data') {
          data.push(value2);
          sawData = true;
        } else if (field === 'event') event = value2;
        else if (field === 'id' && !value2.includes('\0')) id = value2;
        else if (field === 'retry' && /^\d+$/.test(value2)) onRetry?.(Number(value2));
      }
      buffer = buffer.slice(start);
    }
  } finally {
    reader.releaseLock();
  }
}

/** A Retry-After of whole seconds as milliseconds, between 1 s and a minute; 5 s when absent or a date. */
export function retryAfterMs(header: string | null): number {
  const seconds = header !== null && /^\d{1,6}$/.test(header.trim()) ? Number(header.trim()) : 5;
  return Math.min(60, Math.max(1, seconds)) * 1000;
}

export type FollowState = 'connecting' | 'live' | 'reconnecting' | 'ended' | 'failed';

export interface FollowOptions {
  url: string;
  onEvent: (e: SseEvent) => void;
  onState?: (s: FollowState, detail?: string) => void;
  /** True for the event after which the stream is complete (a job's `finished`). */
  isLast?: (e: SseEvent) => boolean;
  /** Reconnect when the connection drops before the last event (job streams resume by Last-Event-ID). */
  reconnect?: boolean;
  /** The id to resume after, e.g. the last seq already shown. */
  lastEventId?: string | null;
  retryMs?: number;
}

export class SseFollower {
  private controller: AbortController | null = null;
  private stopped = false;
  private lastId: string | null;
  private retryMs: number;

  constructor(private readonly o: FollowOptions) {
    this.lastId = o.lastEventId ?? null;
    this.retryMs = o.retryMs ?? 1000;
  }

  get lastEventId(): string | null {
    return this.lastId;
  }

  start(): this {
    void this.run();
    return this;
  }

  stop(): void {
    this.stopped = true;
    this.controller?.abort();
  }

  private state(s: FollowState, detail?: string) {
    if (!this.stopped || s === 'ended') this.o.onState?.(s, detail);
  }

  private async run(): Promise<void> {
    let attempt = 0;
    while (!this.stopped) {
      this.state(attempt ? 'reconnecting' : 'connecting');
      this.controller = new AbortController();
      let res: Response;
      try {
        res = await fetch(this.o.url, {
          headers: authHeaders({ accept: 'text/event-stream', ...(this.lastId !== null ? { 'last-event-id': this.lastId } : {}) }),
          cache: 'no-store',
          signal: this.controller.signal,
        });
      } catch (err) {
        if (this.stopped) return;
        if (!this.o.reconnect) return this.state('failed', `the installer did not answer (${(err as Error).message})`);
        attempt++;
        await this.pause();
        continue;
      }
      if (res.status === 401) {
        this.stopped = true;
        signalUnauthorized('your session ended: sign in again');
        return;
      }
      if (!res.ok || !res.body) {
        let message = `${res.status} ${res.statusText}`;
        try {
          message = ((await res.json()) as { message?: string }).message ?? message;
        } catch {
          // keep the status line
        }
        // A server in trouble may come back, and so may a slot when a stream is over its cap (429,
        // after its Retry-After); any other refused request will not change by retrying.
        if (this.o.reconnect && (res.status >= 500 || res.status === 429) && !this.stopped) {
          attempt++;
          this.state('reconnecting', message);
          await this.pause(res.status === 429 ? retryAfterMs(res.headers.get('retry-after')) : undefined);
          continue;
        }
        return this.state('failed', message);
      }
      this.state('live');
      attempt = 0;
      try {
        for await (const e of readEventStream(res.body, (ms) => (this.retryMs = ms))) {
          if (this.stopped) return;
          if (e.id !== null) this.lastId = e.id;
          this.o.onEvent(e);
          if (this.o.isLast?.(e)) {
            this.stopped = true;
            this.controller.abort();
            this.o.onState?.('ended');
            return;
          }
        }
      } catch (err) {
        if (this.stopped) return;
        void err; // a dropped connection: reconnect below
      }
      if (this.stopped) return;
      if (!this.o.reconnect) {
        this.o.onState?.('ended');
        return;
      }
      attempt++;
      await this.pause();
    }
  }

  private pause(ms = this.retryMs): Promise<void> {
    return new Promise((r) => setTimeout(r, ms));
  }
}
