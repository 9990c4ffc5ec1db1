// Fetches a file the installer will run as root (the platform's templates, the published compose
// file) from a source it can trust (docs/adr/0041-trusted-sources-and-staging.md): https, or plain
// http to loopback only; redirects followed only within the same origin (so never https -> http);
// credentials in the URL sent as Basic authorization, never printed; an optional sha256 pin.
import http from 'node:http';
import https from 'node:https';
import { createHash } from 'node:crypto';
import { rootCertificates } from 'node:tls';
import { pinMismatch, printableUrl, remoteSourceProblem } from '../contracts/trusted-source.ts';

/** Redirects followed within one origin before the fetch gives up. */
export const MAX_REDIRECTS = 5;

export interface TrustedFetchOptions {
  /** What is fetched, in words: "the published compose file". */
  what: string;
  /** For the whole fetch, redirects included. */
  timeoutMs?: number;
  /** A larger answer is refused. */
  maxBytes: number;
  /** Lower-case hex sha256 the body must have; null/undefined: not pinned. */
  sha256?: string | null;
  /** Extra certificate authorities (PEM) trusted besides the system's. */
  ca?: string;
}

export interface Fetched {
  body: Buffer;
  sha256: string;
  /** The URL the body came from, printable (after same-origin redirects). */
  from: string;
}

const REDIRECT = new Set([301, 302, 303, 307, 308]);

interface Answer {
  status: number;
  location: string | null;
  body: Buffer | null;
}

/** One request, no redirect followed; the body is read only for a 2xx answer, up to maxBytes. */
function request(url: URL, headers: Record<string, string>, opts: TrustedFetchOptions, signal: AbortSignal): Promise<Answer> {
  const mod = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(
      url,
      { method: 'GET', headers, signal, ...(url.protocol === 'https:' && opts.ca ? { ca: [...rootCertificates, opts.ca], agent: false } : {}) },
      (res) => {
        const status = res.statusCode ?? 0;
        if (status < 200 || status >= 300) {
          res.resume();
          resolve({ status, location: typeof res.headers.location === 'string' ? res.headers.location : null, body: null });
          return;
        }
        const declared = Number(res.headers['content-length']);
        if (Number.isFinite(declared) && declared > opts.maxBytes) {
          res.destroy();
          reject(new Error(`the answer is larger than ${opts.maxBytes} bytes`));
          return;
        }
        const parts: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > opts.maxBytes) {
            res.destroy();
            reject(new Error(`the answer is larger than ${opts.maxBytes} bytes`));
            return;
          }
          parts.push(c);
        });
        res.on('end', () => resolve({ status, location: null, body: Buffer.concat(parts) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** Basic authorization from the URL's user name and password (which fetch would refuse outright). */
function authorization(url: URL): Record<string, string> {
  if (!url.username && !url.password) return {};
  const pair = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
  return { authorization: `Basic ${Buffer.from(pair).toString('base64')}` };
}

/** Why a redirect from `from` to `to` is refused; null when it is followed. */
export function redirectProblem(from: URL, to: URL): string | null {
  if (from.protocol === 'https:' && to.protocol !== 'https:') return `a redirect from https to ${to.protocol.replace(/:$/, '')} is refused`;
  if (to.origin !== from.origin) return 'a redirect to another origin is refused';
  return remoteSourceProblem(to);
}

/**
 * GETs `source`. Throws, with the URL printed without credentials or query string, when the source
 * is not trusted, a redirect leaves its origin, the answer is not 2xx or too large, or the body
 * does not match its pin.
 */
export async function fetchTrusted(source: string | URL, opts: TrustedFetchOptions): Promise<Fetched> {
  const first = new URL(String(source));
  const shown = printableUrl(first);
  const problem = remoteSourceProblem(first);
  if (problem) throw new Error(`${opts.what}: ${shown} ${problem}`);
  const headers = { ...authorization(first), 'user-agent': 'installer', accept: '*/*' };
  first.username = '';
  first.password = '';
  const signal = AbortSignal.timeout(opts.timeoutMs ?? 60_000);
  let url = first;
  for (let hops = 0; ; hops++) {
    let answer: Answer;
    try {
      answer = await request(url, headers, opts, signal);
    } catch (err) {
      const e = err as Error & { cause?: Error };
      const why = e.name === 'AbortError' || e.name === 'TimeoutError' ? `no answer within ${(opts.timeoutMs ?? 60_000) / 1000} s` : e.message;
      throw new Error(`cannot fetch ${opts.what} from ${printableUrl(url)}: ${why}`);
    }
    if (REDIRECT.has(answer.status)) {
      if (!answer.location) throw new Error(`fetching ${opts.what} from ${printableUrl(url)} failed: HTTP ${answer.status} without a Location`);
      let next: URL;
      try {
        next = new URL(answer.location, url);
      } catch {
        throw new Error(`fetching ${opts.what} from ${printableUrl(url)} failed: HTTP ${answer.status} to an unparsable Location`);
      }
      const refused = redirectProblem(url, next);
      if (refused) throw new Error(`fetching ${opts.what} from ${printableUrl(url)}: ${refused} (to ${printableUrl(next)})`);
      if (hops + 1 > MAX_REDIRECTS) throw new Error(`fetching ${opts.what} from ${shown}: more than ${MAX_REDIRECTS} redirects`);
      next.username = '';
      next.password = '';
      url = next;
      continue;
    }
    if (!answer.body) throw new Error(`fetching ${opts.what} from ${printableUrl(url)} failed: HTTP ${answer.status}`);
    const sha256 = createHash('sha256').update(answer.body).digest('hex');
    if (opts.sha256 && sha256 !== opts.sha256) throw new Error(pinMismatch(`${opts.what} from ${shown}`, opts.sha256, sha256));
    return { body: answer.body, sha256, from: printableUrl(url) };
  }
}
