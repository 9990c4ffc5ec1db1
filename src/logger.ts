// One pino logger for the process. Secret values are scrubbed from every serialized line,
// whatever field or message they hide in; known sensitive fields are redacted by path.
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

/** Builds a function that replaces every occurrence of any secret (and its JSON-escaped form) with a marker. */
export function secretScrubber(secrets: readonly string[]): (line: string) => string {
  const needles = new Set<string>();
  for (const s of secrets) {
    if (!s || s.length < 6) continue; // too short to be a real secret; would shred ordinary text
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

export interface LoggerOptions {
  level: string;
  secrets: readonly string[];
  destination?: DestinationStream;
}

export function createLogger(opts: LoggerOptions): Logger {
  const scrub = secretScrubber(opts.secrets);
  return pino(
    {
      level: opts.level,
      redact: { paths: REDACT_PATHS, censor: REDACTED },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      hooks: { streamWrite: scrub },
    },
    opts.destination ?? pino.destination({ dest: 1, sync: false }),
  );
}
