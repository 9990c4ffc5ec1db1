// The time of the last answer this process sent, for the downtime a self-update measures
// (docs/adr/0031-update-history.md): when the helper's switch stops this backend, that time is the
// outage's start. A 5xx is not an answer a client can use, so it does not count.
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
