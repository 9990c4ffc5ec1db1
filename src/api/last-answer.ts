// The time of the last answer this process sent, for the downtime a self-update measures
// (docs/adr/0031-update-history.md): when the helper's switch stops this backend, the later of that
// time and the moment it stopped accepting requests is the outage's start. A 5xx is not an answer a
// client can use, so it does not count.
import fp from 'fastify-plugin';
import type { FastifyInstance } from 'fastify';

export class LastAnswer {
  private ms: number | null = null;

  note(statusCode: number, now = Date.now()): void {
    if (statusCode < 500) this.ms = now;
  }

  get at(): Date | null {
    return this.ms === null ? null : new Date(this.ms);
  }

  /**
   * The end of this backend's service when it stops: its last answer, or the moment it stopped
   * accepting requests when that came later. An idle backend would have answered anyone until
   * then, so the time since its last request is no downtime; an answer to a request already in
   * flight when it stopped accepting comes later and counts.
   */
  servedUntil(stoppedAcceptingAt: Date): Date {
    return this.ms !== null && this.ms > stoppedAcceptingAt.getTime() ? new Date(this.ms) : stoppedAcceptingAt;
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    lastAnswer: LastAnswer;
  }
}

export const lastAnswerPlugin = fp(
  async (app: FastifyInstance) => {
    const last = new LastAnswer();
    app.decorate('lastAnswer', last);
    app.addHook('onResponse', (_req, reply, done) => {
      last.note(reply.statusCode);
      done();
    });
  },
  { name: 'last-answer' },
);
