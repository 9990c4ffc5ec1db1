// The soak's webhook receiver: counts what arrives, by key; fails one attempt in ten.
import { createServer, type Server } from 'node:http';
import { freePort } from '../../test/helpers/e2e/rig.ts';

export interface Hit { key: string; eventId: string; type: string; answered: number; at: number }

export class Receiver {
  readonly hits: Hit[] = [];
  private server: Server | null = null;
  port = 0;

  async start(): Promise<void> {
    this.port = await freePort();
    this.server = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        let eventId = '?';
        try {
          eventId = (JSON.parse(body) as { id: string }).id;
        } catch {
          /* recorded as '?' */
        }
        const answered = Math.random() < 0.1 ? 500 : 200;
        this.hits.push({ key: String(req.headers['x-installer-delivery']), eventId, type: String(req.headers['x-installer-event']), answered, at: Date.now() });
        res.statusCode = answered;
        res.end();
      });
    });
    await new Promise<void>((r) => this.server!.listen(this.port, '0.0.0.0', r));
  }

  stop(): void {
    this.server?.closeAllConnections();
    this.server?.close();
  }
}
