// What every request needs to know of the user its token names, kept in memory: the token
// generation, role, and whether the user is disabled or must choose a password. The process's own
// writes refresh it at once; other processes' writes arrive by NOTIFY on the users channel, which
// first forgets the user (so the next request reads the row) and then re-reads it. A token whose
// generation is not the user's current one, or whose id the user signed out, stops working on the
// next request (docs/adr/0016-user-management.md).
import type { Role } from '../db/schema.ts';

/** How long a writer waits for the notice of its own change to come back. */
export const ECHO_WAIT_MS = 1_000;
/**
 * And a little longer once it has: each listening session's server process forwards the notice
 * on its own schedule, so another installer may hear it a few milliseconds after this one.
 */
export const ECHO_GRACE_MS = 50;

export interface UserStanding {
  /** The user row's id: a user removed and added again under the same name is another user. */
  id: number;
  role: Role;
  disabled: boolean;
  mustChangePassword: boolean;
  tokenGeneration: number;
  /** Ids (`jti`) of this user's signed-out tokens that have not expired yet. */
  revokedTokens: ReadonlySet<string>;
}

export interface UserRow extends UserStanding {
  username: string;
}

export interface UserDirectorySource {
  /** Every user, or the one named. */
  load(username?: string): Promise<UserRow[]>;
  /** Subscribes to changes: the payload is a user name, or '' when anything may have changed. */
  listen?(onChange: (username: string) => void): Promise<() => Promise<void>>;
}

export class UserDirectory {
  /** null: no such user (a token naming a removed user is refused without a query). */
  private readonly known = new Map<string, UserStanding | null>();
  private readonly pending = new Map<string, Promise<UserStanding | null>>();
  /** Bumped on every change notice: a read that started before it must not be stored. */
  private epoch = 0;
  private unlisten: (() => Promise<void>) | undefined;
  private started: Promise<void> | undefined;
  private listening = false;
  /** Callers waiting to see the notice of their own write come back. */
  private readonly echoes = new Map<string, Set<() => void>>();

  constructor(private readonly source: UserDirectorySource) {}

  /** Loads every user and subscribes to changes; safe to call more than once. */
  start(): Promise<void> {
    this.started ??= (async () => {
      if (this.source.listen) {
        this.unlisten = await this.source.listen((name) => this.changed(name));
        this.listening = true;
      }
      await this.reloadAll();
    })();
    return this.started;
  }

  async stop(): Promise<void> {
    const u = this.unlisten;
    this.unlisten = undefined;
    this.listening = false;
    this.started = undefined;
    await u?.();
  }

  /** The user's standing if known now (null: no such user); undefined: it must be read first. */
  peek(username: string): UserStanding | null | undefined {
    return this.known.get(username);
  }

  /** Reads the user's standing from the database (one read at a time per user). */
  fetch(username: string): Promise<UserStanding | null> {
    let p = this.pending.get(username);
    if (!p) {
      const epoch = this.epoch;
      const read: Promise<UserStanding | null> = this.source
        .load(username)
        .then((rows) => {
          const row = rows.find((r) => r.username === username);
          const standing = row ? standingOf(row) : null;
          if (epoch === this.epoch) this.known.set(username, standing);
          return standing;
        })
        .finally(() => {
          if (this.pending.get(username) === read) this.pending.delete(username);
        });
      this.pending.set(username, (p = read));
    }
    return p;
  }

  /**
   * Runs this process's own write to a user, then waits (up to ECHO_WAIT_MS) until its notice
   * comes back on this process's LISTEN connection before re-reading the user. Postgres sends a
   * notice to every listening session when the transaction commits, so by then every other
   * installer process has been told too, before the caller gets an answer and can act on it.
   */
  async applying<T>(username: string, write: () => Promise<T>): Promise<T> {
    let echoed: Promise<void> | undefined;
    let cancel = () => {};
    if (this.listening) {
      echoed = new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.echoes.get(username)?.delete(done);
          resolve();
        };
        const timer = setTimeout(done, ECHO_WAIT_MS);
        let set = this.echoes.get(username);
        if (!set) this.echoes.set(username, (set = new Set()));
        set.add(done);
        cancel = done;
      });
    }
    try {
      const result = await write();
      if (echoed) {
        await echoed;
        await new Promise((r) => setTimeout(r, ECHO_GRACE_MS));
      }
      return result;
    } finally {
      cancel();
      await this.refresh(username);
    }
  }

  /** After a change (this process's own write, or a notice): forget, then re-read. */
  async refresh(username: string): Promise<void> {
    this.changed(username);
    await this.fetch(username).catch(() => {});
  }

  private changed(username: string): void {
    this.epoch++;
    for (const done of [...(this.echoes.get(username) ?? [])]) done();
    if (username === '') {
      this.known.clear();
      void this.reloadAll().catch(() => {});
      return;
    }
    this.known.delete(username);
    this.pending.delete(username);
    void this.fetch(username).catch(() => {});
  }

  private async reloadAll(): Promise<void> {
    const epoch = this.epoch;
    const rows = await this.source.load();
    if (epoch !== this.epoch) return; // a change arrived meanwhile: entries are read one by one
    this.known.clear();
    for (const r of rows) this.known.set(r.username, standingOf(r));
  }
}

function standingOf(r: UserStanding): UserStanding {
  return { id: r.id, role: r.role, disabled: r.disabled, mustChangePassword: r.mustChangePassword, tokenGeneration: r.tokenGeneration, revokedTokens: r.revokedTokens };
}
