// Each request's logger (`req.log`, `reply.log`), made a pino child with the request id bound only
// when the request writes a line at an enabled level. Most requests write none (a successful read
// logs at debug, ADR 0015), and creating the child costs as much as the rest of the routing: pino
// serializes and redacts the bindings of every child.
import type { FastifyBaseLogger } from 'fastify';
import { pino, type Bindings, type ChildLoggerOptions, type LevelWithSilent } from 'pino';

const LEVEL_VALUES: Readonly<Record<string, number>> = { ...pino.levels.values, silent: Infinity };

type LogFn = FastifyBaseLogger['info'];

export class LazyRequestLogger implements FastifyBaseLogger {
  private real: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  /** The pino child this logger stands for, created on first use. */
  private materialize(): FastifyBaseLogger {
    return (this.real ??= this.parent.child(this.bindings, this.options));
  }

  get level(): LevelWithSilent | (string & {}) {
    return this.real?.level ?? this.options.level ?? this.parent.level;
  }

  set level(level: string) {
    this.materialize().level = level;
  }

  private enabled(level: string): boolean {
    const threshold = LEVEL_VALUES[this.level];
    return threshold === undefined || (LEVEL_VALUES[level] ?? Infinity) >= threshold;
  }

  trace(...args: Parameters<LogFn>): void {
    if (this.enabled('trace')) this.materialize().trace(...args);
  }
  debug(...args: Parameters<LogFn>): void {
    if (this.enabled('debug')) this.materialize().debug(...args);
  }
  info(...args: Parameters<LogFn>): void {
    if (this.enabled('info')) this.materialize().info(...args);
  }
  warn(...args: Parameters<LogFn>): void {
    if (this.enabled('warn')) this.materialize().warn(...args);
  }
  error(...args: Parameters<LogFn>): void {
    if (this.enabled('error')) this.materialize().error(...args);
  }
  fatal(...args: Parameters<LogFn>): void {
    if (this.enabled('fatal')) this.materialize().fatal(...args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.materialize().child(bindings, options);
  }
}

/** Fastify's `childLoggerFactory`: the request's logger, lazily a child of the server's. */
export function lazyRequestLogger(logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  return new LazyRequestLogger(logger, bindings, options);
}
