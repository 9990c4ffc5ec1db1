// How the runtime (work-queue.ts) and the observer hear NOTIFY: one LISTEN connection per channel
// per process, shared by every queue that wakes on it.

export type Listen = (channel: string, onNotify: (payload: string) => void) => Promise<() => Promise<void>>;

/** One LISTEN connection per channel, shared by every loop in the process that wakes on it. */
export function sharedListen(listen: Listen): Listen {
  const channels = new Map<string, { subscribers: Set<(payload: string) => void>; ready: Promise<() => Promise<void>> }>();
  return async (channel, onNotify) => {
    let c = channels.get(channel);
    if (!c) {
      const subscribers = new Set<(payload: string) => void>();
      const entry = { subscribers, ready: listen(channel, (payload) => { for (const s of subscribers) s(payload); }) };
      channels.set(channel, entry);
      entry.ready.catch(() => channels.delete(channel));
      c = entry;
    }
    const unlistenAll = await c.ready;
    c.subscribers.add(onNotify);
    const entry = c;
    return async () => {
      entry.subscribers.delete(onNotify);
      if (entry.subscribers.size === 0 && channels.get(channel) === entry) {
        channels.delete(channel);
        await unlistenAll();
      }
    };
  };
}
