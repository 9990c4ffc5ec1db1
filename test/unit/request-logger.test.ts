// The lazy per-request logger writes exactly what a pino child would, and creates no child for
// a request that writes nothing at an enabled level.
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { LazyRequestLogger } from '../../src/api/request-logger.ts';

function capture(level: string) {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level, timestamp: false, base: null }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  let children = 0;
  const counting = new Proxy(logger, {
    get(target, prop, receiver) {
      if (prop === 'child') return (...a: Parameters<typeof logger.child>) => (children++, target.child(...a));
      return Reflect.get(target, prop, receiver) as unknown;
    },
  }) as unknown as FastifyBaseLogger;
  return { lines, logger: counting, children: () => children };
}

describe('LazyRequestLogger', () => {
  it('writes the same lines as a pino child with the same bindings', () => {
    const lazy = capture('debug');
    const eager = capture('debug');
    const a = new LazyRequestLogger(lazy.logger, { reqId: 'req-1' }, {});
    const b = eager.logger.child({ reqId: 'req-1' });
    for (const l of [a, b]) {
      l.debug({ url: '/x', statusCode: 200 }, 'request completed');
      l.info('plain %s', 'message');
      l.error({ err: new Error('boom') }, 'request errored');
      l.trace('below the level');
    }
    expect(lazy.lines).toEqual(eager.lines);
    expect(lazy.lines.map((l) => l.reqId)).toEqual(['req-1', 'req-1', 'req-1']);
  });

  it('creates no child while nothing is written at an enabled level, and one when something is', () => {
    const c = capture('info');
    const l = new LazyRequestLogger(c.logger, { reqId: 'req-2' }, {});
    l.debug({ url: '/quiet' }, 'request completed');
    l.trace('nothing');
    expect(c.children()).toBe(0);
    expect(c.lines).toEqual([]);
    l.warn('something');
    l.info('and more');
    expect(c.children()).toBe(1);
    expect(c.lines.map((x) => x.msg)).toEqual(['something', 'and more']);
  });

  it("honours a route's own level, and a level set on it later", () => {
    const c = capture('info');
    const l = new LazyRequestLogger(c.logger, { reqId: 'req-3' }, { level: 'warn' });
    expect(l.level).toBe('warn');
    l.info('hidden by the route level');
    expect(c.children()).toBe(0);
    l.warn('shown');
    expect(c.lines.map((x) => x.msg)).toEqual(['shown']);
    l.level = 'silent';
    l.fatal('hidden: silent');
    expect(c.lines).toHaveLength(1);
    l.level = 'trace';
    l.trace('shown at trace');
    expect(c.lines.map((x) => x.msg)).toEqual(['shown', 'shown at trace']);
  });

  it('gives children that carry its bindings', () => {
    const c = capture('info');
    const l = new LazyRequestLogger(c.logger, { reqId: 'req-4' }, {});
    l.child({ job: 'j-1' }).info('from the grandchild');
    expect(c.lines).toMatchObject([{ reqId: 'req-4', job: 'j-1', msg: 'from the grandchild' }]);
  });
});
