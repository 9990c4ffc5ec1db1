// The in-memory users' standing behind every token check: a change notice forgets the user at
// once (the next request reads the row), a read that started before a notice is not stored, and
// a writer waits until its own notice comes back.
import { describe, expect, it } from 'vitest';
import { UserDirectory, type UserRow } from '../../src/auth/user-directory.ts';

function source(rows: UserRow[]) {
  let notify: (name: string) => void = () => {};
  const reads: (string | undefined)[] = [];
  let gate: Promise<void> | null = null;
  return {
    rows,
    reads,
    notify: (name: string) => notify(name),
    hold: () => {
      let release!: () => void;
      gate = new Promise<void>((r) => (release = r));
      return () => ((gate = null), release());
    },
    src: {
      async load(username?: string) {
        reads.push(username);
        const snapshot = rows.filter((r) => username === undefined || r.username === username).map((r) => ({ ...r }));
        if (gate) await gate;
        return snapshot;
      },
      async listen(onChange: (name: string) => void) {
        notify = onChange;
        return async () => {};
      },
    },
  };
}

const amy: UserRow = { id: 1, username: 'amy', role: 'operator', disabled: false, mustChangePassword: false, tokenGeneration: 1, revokedTokens: new Set() };

describe('user directory', () => {
  it('knows every user after start, and a removed one as absent after a read', async () => {
    const s = source([{ ...amy }]);
    const d = new UserDirectory(s.src);
    await d.start();
    expect(d.peek('amy')).toMatchObject({ role: 'operator', tokenGeneration: 1 });
    expect(d.peek('bob')).toBeUndefined();
    expect(await d.fetch('bob')).toBeNull();
    expect(d.peek('bob')).toBeNull();
  });

  it('a notice forgets the user synchronously, and the re-read brings the new standing', async () => {
    const s = source([{ ...amy }]);
    const d = new UserDirectory(s.src);
    await d.start();
    s.rows[0]!.tokenGeneration = 2;
    s.notify('amy');
    expect(d.peek('amy')).toBeUndefined();
    expect(await d.fetch('amy')).toMatchObject({ tokenGeneration: 2 });
    expect(d.peek('amy')).toMatchObject({ tokenGeneration: 2 });
  });

  it('does not store a read that a notice overtook', async () => {
    const s = source([{ ...amy }]);
    const d = new UserDirectory(s.src);
    await d.start();
    s.notify('amy');
    const release = s.hold();
    const stale = d.fetch('amy'); // reads generation 1, held
    s.rows[0]!.tokenGeneration = 3;
    s.notify('amy');
    release();
    await stale;
    // The second notice's own read stores the current row, never the overtaken one.
    await expect.poll(() => d.peek('amy')?.tokenGeneration).toBe(3);
  });

  it('a writer waits for its own notice before it answers', async () => {
    const s = source([{ ...amy }]);
    const d = new UserDirectory(s.src);
    await d.start();
    let answered = false;
    const write = d.applying('amy', async () => {
      s.rows[0]!.disabled = true;
      setTimeout(() => s.notify('amy'), 200);
      return 'done';
    });
    void write.then(() => (answered = true));
    await new Promise((r) => setTimeout(r, 100));
    expect(answered).toBe(false);
    expect(await write).toBe('done');
    expect(d.peek('amy')).toMatchObject({ disabled: true });
  });
});
