// A LISTEN opened at its first use and kept for the process, for readers that wait on a channel or
// drop what they keep when it notifies (the audit trail's pages, the update check's wait for the
// observer): a process that never reads holds no connection for it. A failed open is tried again at
// the next use.
import type { Database } from '../db/database.ts';

export class LazyListen {
  private listening: Promise<() => Promise<void>> | null = null;
  /** True once the LISTEN is open, until it is closed. */
  open = false;

  constructor(
    private readonly listen: Database['listen'],
    private readonly channel: string,
    private readonly onNotify: (payload: string) => void,
  ) {}

  /** Opens the LISTEN once; rejects when it cannot be opened (the next call tries again). */
  start(): Promise<void> {
    this.listening ??= this.listen(this.channel, this.onNotify).then(
      (unlisten) => {
        this.open = true;
        return unlisten;
      },
      (err: unknown) => {
        this.listening = null;
        throw err;
      },
    );
    return this.listening.then(() => undefined);
  }

  /** Stops listening (the app closes). */
  async close(): Promise<void> {
    const unlisten = await this.listening?.catch(() => null);
    this.listening = null;
    this.open = false;
    await unlisten?.();
  }
}
