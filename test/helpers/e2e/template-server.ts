// A platform templates server whose downloads the test holds (PLATFORM_TEMPLATES_URL): serves the
// files of a directory of its own; while armed, keeps each request waiting until the test releases
// it (served, or answered with `failWith`) or drops it.
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';

export class HeldTemplateServer {
  /** Requests held while armed. */
  readonly waiting: ServerResponse[] = [];
  /** Hold each request until `release` or `drop`. */
  armed = false;
  /** The status each download is answered with instead of its file; null: the file. */
  failWith: number | null = null;
  private readonly dir = mkdtempSync(path.join(tmpdir(), 'held-templates-'));
  private server: Server | null = null;

  /** Serves copies of `files` (name in the templates → source path), on 127.0.0.1. */
  async start(files: Record<string, string>): Promise<void> {
    for (const [name, from] of Object.entries(files)) cpSync(from, path.join(this.dir, name));
    this.server = createServer((req, res) => {
      if (this.armed) {
        this.waiting.push(res);
        return;
      }
      this.answer(res, req.url ?? '');
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server!.address() as { port: number }).port}/`;
  }

  /** Answers the held downloads (their files, or `failWith`) and holds no more. */
  release(): void {
    this.armed = false;
    for (const r of this.waiting.splice(0)) this.answer(r, r.req.url ?? '');
  }

  /** Drops the held downloads unanswered and holds no more. */
  drop(): void {
    this.armed = false;
    for (const r of this.waiting.splice(0)) r.destroy();
  }

  close(): void {
    this.drop();
    this.server?.close();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private answer(res: ServerResponse, url: string): void {
    if (this.failWith) {
      res.statusCode = this.failWith;
      res.end();
      return;
    }
    try {
      res.end(readFileSync(path.join(this.dir, path.basename(url))));
    } catch {
      res.statusCode = 404;
      res.end();
    }
  }
}
