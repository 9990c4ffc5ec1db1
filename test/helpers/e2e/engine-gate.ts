// A gate in front of the Docker engine's Unix socket for crash-injection tests: every request is
// passed through to the real engine, except those matching an armed hold (method, path, and
// optionally the client's User-Agent), which wait until the test releases them. A held request
// whose client goes away (the backend was killed) is dropped without ever reaching the engine, so
// a kill while held is a crash *before* the engine acted. Nothing in the installer knows about it:
// the backend's DOCKER_SOCKET (which compose follows too) simply points at the gate's socket.
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { rmSync } from 'node:fs';

export interface HoldRule {
  method: string;
  path: RegExp;
  userAgent?: RegExp;
}

export interface HeldRequest {
  method: string;
  path: string;
  userAgent: string;
  /** True once the client closed its connection while the request was held. */
  clientGone: boolean;
  release(): void;
  /** Answers the request with an engine error instead of passing it on. */
  fail(status: number, message: string): void;
}

export interface Hold {
  rule: HoldRule;
  held: HeldRequest[];
  /** Resolves with the first request this hold caught (or rejects after the timeout). */
  hit(timeoutMs?: number): Promise<HeldRequest>;
  /** Disarms the hold and lets everything it holds through. */
  release(): void;
}

export class EngineGate {
  private server: Server | undefined;
  private readonly holds = new Set<Hold & { waiters: ((h: HeldRequest) => void)[] }>();
  private readonly sockets = new Set<Socket>();
  /** Every request seen, `METHOD path`, for diagnostics. */
  readonly seen: string[] = [];
  /** While set, a new request's connection is dropped at once: the engine is unreachable. */
  private refusing = false;
  /** Requests dropped while refusing. */
  refused = 0;
  /** Answers the gate rewrites on their way back: the engine's own JSON, changed by the test. */
  private readonly alterations: { rule: HoldRule; change: (body: Record<string, unknown>) => Record<string, unknown> }[] = [];

  constructor(
    readonly socketPath: string,
    private readonly upstream = '/var/run/docker.sock',
  ) {}

  async start(): Promise<void> {
    rmSync(this.socketPath, { force: true });
    const server = createServer((req, res) => this.onRequest(req, res));
    // Held requests and followed log streams last as long as they need to.
    server.requestTimeout = 0;
    server.headersTimeout = 0;
    server.keepAliveTimeout = 60_000;
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    server.on('upgrade', (req, socket, head) => this.onUpgrade(req, socket as Socket, head));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.socketPath, () => resolve());
    });
    this.server = server;
  }

  async close(): Promise<void> {
    for (const h of this.holds) h.release();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    rmSync(this.socketPath, { force: true });
  }

  /**
   * Makes the engine unreachable for the gate's clients (every new request's connection is dropped
   * before it reaches the engine), or reachable again. Requests already passed on are not touched.
   */
  refuse(on: boolean): void {
    this.refusing = on;
  }

  hold(rule: HoldRule): Hold {
    const held: HeldRequest[] = [];
    const waiters: ((h: HeldRequest) => void)[] = [];
    const h = {
      rule,
      held,
      waiters,
      hit: (timeoutMs = 60_000) =>
        new Promise<HeldRequest>((resolve, reject) => {
          if (held[0]) return resolve(held[0]);
          const timer = setTimeout(() => reject(new Error(`no ${rule.method} ${rule.path} reached the engine gate in ${timeoutMs} ms; seen: ${this.seen.slice(-15).join(' | ')}`)), timeoutMs);
          waiters.push((r) => {
            clearTimeout(timer);
            resolve(r);
          });
        }),
      release: () => {
        this.holds.delete(h);
        for (const r of held) r.release();
      },
    };
    this.holds.add(h);
    return h;
  }

  /**
   * Passes matching requests on to the engine and changes its JSON answer before the client sees
   * it (an engine that reports another version, say): what the client reads is the real engine's
   * answer but for what `change` says.
   */
  alter(rule: HoldRule, change: (body: Record<string, unknown>) => Record<string, unknown>): void {
    this.alterations.push({ rule, change });
  }

  private match(req: IncomingMessage): (Hold & { waiters: ((h: HeldRequest) => void)[] }) | undefined {
    const ua = req.headers['user-agent'] ?? '';
    for (const h of this.holds) {
      if (h.rule.method === req.method && h.rule.path.test(req.url ?? '') && (!h.rule.userAgent || h.rule.userAgent.test(ua))) return h;
    }
    return undefined;
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    this.seen.push(`${req.method} ${req.url} [${req.headers["user-agent"] ?? ""}]`);
    if (this.seen.length > 500) this.seen.splice(0, 100);
    if (this.refusing) {
      this.refused++;
      req.socket.destroy();
      return;
    }
    const alteration = this.alterations.find((a) => a.rule.method === req.method && a.rule.path.test(req.url ?? ''));
    if (alteration) return this.forwardAltered(req, res, alteration.change);
    const h = this.match(req);
    if (!h) return this.forward(req, res);
    let released = false;
    const held: HeldRequest = {
      method: req.method ?? '',
      path: req.url ?? '',
      userAgent: req.headers['user-agent'] ?? '',
      clientGone: false,
      release: () => {
        if (released) return;
        released = true;
        if (!held.clientGone) this.forward(req, res);
      },
      fail: (status, message) => {
        if (released) return;
        released = true;
        req.resume();
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ message }));
      },
    };
    req.socket.on('close', () => {
      if (!released) held.clientGone = true;
    });
    h.held.push(held);
    for (const w of h.waiters.splice(0)) w(held);
  }

  private forward(req: IncomingMessage, res: ServerResponse): void {
    const up = request({ socketPath: this.upstream, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, upRes.headers);
      upRes.pipe(res);
    });
    up.on('error', (err) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ message: `engine gate: ${err.message}` }));
    });
    res.on('close', () => up.destroy());
    req.pipe(up);
  }

  private forwardAltered(req: IncomingMessage, res: ServerResponse, change: (body: Record<string, unknown>) => Record<string, unknown>): void {
    const up = request({ socketPath: this.upstream, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
      const parts: Buffer[] = [];
      upRes.on('data', (c: Buffer) => parts.push(c));
      upRes.on('end', () => {
        const body = JSON.stringify(change(JSON.parse(Buffer.concat(parts).toString('utf8')) as Record<string, unknown>));
        res.writeHead(upRes.statusCode ?? 502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
    });
    up.on('error', (err) => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ message: `engine gate: ${err.message}` }));
    });
    req.pipe(up);
  }

  /** Hijacked connections (attach, exec): replay the request head and splice both ways. */
  private onUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    this.seen.push(`${req.method} ${req.url} (upgrade)`);
    if (this.refusing) {
      this.refused++;
      socket.destroy();
      return;
    }
    const up = connect(this.upstream, () => {
      let text = `${req.method} ${req.url} HTTP/${req.httpVersion}\r\n`;
      for (let i = 0; i < req.rawHeaders.length; i += 2) text += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
      up.write(`${text}\r\n`);
      if (head.length) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    up.on('error', () => socket.destroy());
    socket.on('error', () => up.destroy());
    socket.on('close', () => up.destroy());
  }
}
