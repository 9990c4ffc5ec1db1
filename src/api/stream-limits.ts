// Bounded live streams (docs/adr/0040-bounded-connections.md). A job's event stream, a container
// log stream and a log download each hold a connection for as long as the client keeps it, and a
// log stream holds one engine attachment per platform container as well. Each caller (a user
// name; the service token, whatever person it forwards) may hold STREAMS_PER_PRINCIPAL of them at
// once, and the installer serves STREAMS_TOTAL at once; one past either cap is answered 429 with
// Retry-After before the route does any work. A slot is freed when its response closes: the
// client went away, the stream ended, or the app closed it.
import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyRequest, preHandlerHookHandler } from 'fastify';
import type { Principal } from '../auth/actor.ts';
import { errorBody } from './errors.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** A long-lived response that is not an event stream (the log download): it takes a stream slot too. */
    stream?: boolean;
  }
}

/** Seconds a refused caller is asked to wait: streams end when their reader leaves, not on a schedule. */
export const STREAM_RETRY_AFTER_SECONDS = 5;

export interface StreamCaps {
  perPrincipal: number;
  total: number;
}

export type Refusal = { cap: 'STREAMS_PER_PRINCIPAL' | 'STREAMS_TOTAL'; message: string };

/** The open streams, by caller. `acquire` gives a release function, or the cap that refuses. */
export class StreamSlots {
  private readonly byKey = new Map<string, number>();
  private open = 0;

  constructor(private readonly caps: StreamCaps) {}

  get total(): number {
    return this.open;
  }

  of(key: string): number {
    return this.byKey.get(key) ?? 0;
  }

  acquire(key: string, who: string): (() => void) | Refusal {
    const held = this.of(key);
    if (held >= this.caps.perPrincipal) {
      return {
        cap: 'STREAMS_PER_PRINCIPAL',
        message: `too many open streams: ${who} already holds ${held}, the most one caller may hold at once (STREAMS_PER_PRINCIPAL=${this.caps.perPrincipal}); close one, then try again`,
      };
    }
    if (this.open >= this.caps.total) {
      return {
        cap: 'STREAMS_TOTAL',
        message: `too many open streams: the installer already serves ${this.open}, the most it serves at once (STREAMS_TOTAL=${this.caps.total}); try again shortly`,
      };
    }
    this.byKey.set(key, held + 1);
    this.open++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.open--;
      const left = (this.byKey.get(key) ?? 1) - 1;
      if (left > 0) this.byKey.set(key, left);
      else this.byKey.delete(key);
    };
  }
}

/** The caller a slot is counted against, and how the refusal names it. */
export function callerOf(principal: Principal | null, ip: string): { key: string; who: string } {
  if (!principal) return { key: `address ${ip}`, who: `the address ${ip}` };
  if (principal.kind === 'service') return { key: 'service', who: 'the service token' };
  return { key: `user ${principal.username}`, who: `the user ${principal.username}` };
}

declare module 'fastify' {
  interface FastifyInstance {
    streamSlots: StreamSlots;
  }
}

/** Marks every event-stream route, and every route configured `stream: true`, as taking a slot. */
export const streamLimitsPlugin = fp(
  async (app: FastifyInstance, opts: StreamCaps) => {
    const slots = new StreamSlots(opts);
    app.decorate('streamSlots', slots);
    const take: preHandlerHookHandler = (req: FastifyRequest, reply, done) => {
      const caller = callerOf(req.principal, req.ip);
      const got = slots.acquire(caller.key, caller.who);
      if (typeof got !== 'function') {
        req.log.info({ cap: got.cap, caller: caller.who, open: slots.total }, 'refused a stream over its cap');
        void reply.status(429).header('retry-after', String(STREAM_RETRY_AFTER_SECONDS)).send(errorBody(429, got.message, 'rate_limited'));
        return;
      }
      // 'close' comes once, whether the stream ended, the client left or the app ended it.
      reply.raw.once('close', got);
      done();
    };
    app.addHook('onRoute', (r) => {
      if (!(r as { sse?: unknown }).sse && !r.config?.stream) return;
      // First of the route's handlers: a refused stream costs nothing, and is counted nowhere.
      r.preHandler = [take, ...[r.preHandler ?? []].flat()];
    });
  },
  { name: 'stream-limits', dependencies: ['auth'] },
);
