// One pino logger for the process. Secret values are scrubbed from every serialized line,
// whatever field or message they hide in; known sensitive fields are redacted by path. The last
// lines are also kept in memory (already scrubbed) for the diagnostics bundle.
import { pino, type Logger, type DestinationStream } from 'pino';

export const REDACTED = '[REDACTED]';

const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'password',
  '*.password',
  'token',
  '*.token',
  'secret',
  '*.secret',
];

/** Shorter values are not treated as secrets: replacing them would shred ordinary text. */
const MIN_SECRET_LENGTH = 6;

/** Builds a function that replaces every occurrence of any secret (and its JSON-escaped form) with a marker. */
export function secretScrubber(secrets: Iterable<string>): (line: string) => string {
  const needles = new Set<string>();
  for (const s of secrets) {
    if (!s || s.length < MIN_SECRET_LENGTH) continue;
    needles.add(s);
    needles.add(JSON.stringify(s).slice(1, -1));
  }
  if (needles.size === 0) return (line) => line;
  const list = [...needles].sort((a, b) => b.length - a.length);
  return (line) => {
    let out = line;
    for (const n of list) if (out.includes(n)) out = out.split(n).join(REDACTED);
    return out;
  };
}

/**
 * The secret values the process knows, growing when one is rotated in (a replaced service token
 * file): the old value stays a secret too. Every scrubber in the process reads through one set.
 */
export class SecretSet {
  private readonly values = new Set<string>();
  private scrubber: (line: string) => string = (line) => line;

  constructor(values: Iterable<string> = []) {
    this.add(...values);
  }

  add(...values: (string | undefined)[]): void {
    let changed = false;
    for (const v of values) {
      if (!v || v.length < MIN_SECRET_LENGTH || this.values.has(v)) continue;
      this.values.add(v);
      changed = true;
    }
    if (changed) this.scrubber = secretScrubber(this.values);
  }

  readonly scrub = (line: string): string => this.scrubber(line);
}

/** The last serialized log lines (bounded by count and bytes), for the diagnostics bundle. */
export class RecentLines implements DestinationStream {
  private lines: string[] = [];
  private bytes = 0;

  constructor(
    private readonly maxLines = 500,
    private readonly maxBytes = 512 * 1024,
  ) {}

  write(chunk: string): void {
    const line = chunk.endsWith('\n') ? chunk.slice(0, -1) : chunk;
    this.lines.push(line);
    this.bytes += line.length;
    while (this.lines.length > this.maxLines || (this.bytes > this.maxBytes && this.lines.length > 1)) {
      this.bytes -= this.lines.shift()!.length;
    }
  }

  snapshot(): string[] {
    return [...this.lines];
  }
}

export interface LoggerOptions {
  level: string;
  secrets: SecretSet | readonly string[];
  destination?: DestinationStream;
  /** Also keep the last lines here (they are scrubbed before they reach it). */
  recent?: RecentLines;
}

export function createLogger(opts: LoggerOptions): Logger {
  const set = opts.secrets instanceof SecretSet ? opts.secrets : new SecretSet(opts.secrets);
  const out = opts.destination ?? pino.destination({ dest: 1, sync: false });
  const stream = opts.recent ? pino.multistream([{ stream: out, level: 'trace' }, { stream: opts.recent, level: 'trace' }]) : out;
  return pino(
    {
      level: opts.level,
      redact: { paths: REDACT_PATHS, censor: REDACTED },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      hooks: { streamWrite: set.scrub },
    },
    stream,
  );
}
