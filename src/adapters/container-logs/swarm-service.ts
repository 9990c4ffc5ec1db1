// The platform's logs when it runs as a Swarm stack (PLATFORM_RUNTIME=swarm): the ContainerLogsPort
// over the stack's services, every line named with its node and task (docs/adr/0056-platform-on-a-swarm.md;
// the endpoints and their limits as docs/adr/0007-container-logs.md has them). History (a tail, a window) is read per task (`/tasks/{id}/logs`): one task
// is one container on one node, in its own order, so the strict k-way merge of the compose runtime
// orders them across nodes with the same bounded read-ahead. Live lines are read per service
// (`/services/{id}/logs`, which follows rescheduled and added replicas by itself) and pass through a
// short hold-back (hold-back.ts), since one service's stream interleaves its nodes as they deliver.
// The engine applies `since` to these endpoints but not `until`: the adapter drops later lines and
// ends a history read at the first line well past the end.
import type Docker from 'dockerode';
import type { Readable } from 'node:stream';
import type { ContainerLogLine, LogSelection } from '../../contracts/ports.ts';
import { HoldBack } from './hold-back.ts';
import { LineSource, type ContainerRef, type SourceOptions } from './line-source.ts';
import { Closer, FeedPort, mergeOrdered, Wakeup, type FeedMode, type FeedStart } from './merge.ts';
import { joinOnEvents, openLogStream, type LogParams } from './open-logs.ts';
import { JoinQueue, type LogsOptions } from './service.ts';
import { StackDirectory, taskIdOf, type StackService, type StackTask } from './swarm-directory.ts';
import { engineTime, NS_PER_MS, nsToTimestamp, timestampToNs } from './time.ts';

const NS_PER_S = 1_000_000_000n;

interface SwarmLogsOptions extends LogsOptions {
  /** How long a live line is held for lines of other nodes stamped before it (hold-back.ts). */
  holdMs?: number;
  /** A history read ends at the first line stamped this long after its end (the engine ignores `until`). */
  stopAfterMs?: number;
}

interface Opened {
  dir: StackDirectory;
  joins: JoinQueue;
  services: StackService[];
  tasks: StackTask[];
  taskFilter?: string;
}

/** A service's live stream, and the last line already taken of each of its tasks (to resume after). */
interface Follower {
  src: LineSource;
  skip: Map<string, string>;
}

const LIVE_BATCH = 512;
/** Lines taken from the followers into the hold-back at most; past half of it the earliest leave at once. */
const HOLD_PULL = 8192;

export class SwarmServiceLogs extends FeedPort<Opened> {
  private readonly opts: Required<Omit<SwarmLogsOptions, 'warn'>> & Pick<SwarmLogsOptions, 'warn'>;

  constructor(
    private readonly docker: Docker,
    opts: SwarmLogsOptions,
  ) {
    super();
    this.opts = { bufferBytes: 1024 * 1024, maxLineBytes: 1024 * 1024, untilGraceMs: 1000, holdMs: 250, stopAfterMs: 2000, ...opts };
  }

  protected async open(closer: Closer, sel: LogSelection, follow: boolean): Promise<Opened> {
    // Subscribe to new services before listing, so that one created in between is not missed.
    const joins = new JoinQueue();
    if (follow && sel.containerName === undefined) await this.watchCreates(closer, sel, joins);
    const dir = new StackDirectory(this.docker, sel.project);
    return { dir, joins, ...(await dir.load(sel)) };
  }

  private async source(closer: Closer, path: string, ref: ContainerRef, params: LogParams, extra: Partial<SourceOptions>): Promise<LineSource | null> {
    const maxBytes = params.follow ? Math.ceil(this.opts.bufferBytes / 4) : this.opts.bufferBytes;
    // The engine's own message, such as a node that is down: the read goes on with the other nodes.
    const systemError = (message: string) => this.opts.warn?.({ service: ref.service, source: ref.name, message }, 'the Swarm could not read every log of a service');
    const src = new LineSource(ref, { scrub: this.opts.scrub, maxBytes, maxLineBytes: this.opts.maxLineBytes, frames: { details: true, systemError }, ...extra });
    closer.track(src);
    if (!(await openLogStream(this.docker, path, { details: true, ...params }, src))) {
      closer.untrack(src);
      return null;
    }
    return src;
  }

  protected async *run(closer: Closer, _sel: LogSelection, mode: FeedMode, o: Opened & FeedStart): AsyncGenerator<ContainerLogLine[]> {
    const { startNs, follow, dir } = o;
    const until = mode.kind === 'window' ? mode.until : undefined;
    const since = mode.kind === 'window' ? mode.since : undefined;
    /** Per service, the last line's timestamp of each task read so far: followers resume after them. */
    const taken = new Map<string, Map<string, string>>();
    try {
      if (mode.kind === 'window' || mode.tail > 0) {
        // History: each task's own log, merged strictly by timestamp. A tail is each task's last
        // lines, and followers resume after them; a following window ends where the read started,
        // and followers read from there.
        const end = mode.kind === 'tail' ? undefined : follow ? startNs : until;
        const params: LogParams = mode.kind === 'tail' ? { tail: mode.tail } : since !== undefined ? { since: engineTime(since) } : {};
        const bounds = end === undefined ? {} : { notAfter: nsToTimestamp(end), stopAfter: nsToTimestamp(end + BigInt(this.opts.stopAfterMs) * NS_PER_MS) };
        const opened = await Promise.all(
          o.tasks.map((t) => {
            const svc = dir.services.get(t.serviceId)!;
            const ref = { id: t.id, name: t.container, service: svc.service, tty: svc.tty };
            return this.source(closer, `/tasks/${encodeURIComponent(t.id)}/logs`, ref, params, { ...bounds, makeLine: dir.taskLine(t, svc) });
          }),
        );
        const history = opened.filter((s): s is LineSource => s !== null);
        yield* mergeOrdered(history, closer, true);
        if (mode.kind === 'tail') {
          for (const s of history) {
            const serviceId = dir.tasks.get(s.ref.id)?.serviceId;
            if (!s.last || serviceId === undefined) continue;
            if (!taken.has(serviceId)) taken.set(serviceId, new Map());
            taken.get(serviceId)!.set(s.ref.id, s.last.timestamp);
          }
        }
      }
      if (!follow || closer.closed) return;

      const floor = since !== undefined && since > startNs ? since : startNs + 1n;
      for (const s of o.services) o.joins.add(s.id);
      // After a tail, a task's next line comes after the history read, which began at startNs: a
      // second earlier is safe (stdout and stderr are copied apart by milliseconds).
      yield* this.followAll(closer, o, taken, {
        floor,
        lowest: mode.kind === 'tail' ? startNs - NS_PER_S : floor,
        ...(until !== undefined ? { notAfter: nsToTimestamp(until), deadline: Number(until / NS_PER_MS) + this.opts.untilGraceMs } : {}),
      });
    } finally {
      closer.close();
    }
  }

  /** New services of the stack (a redeploy that adds one) join the followers. */
  private async watchCreates(closer: Closer, sel: LogSelection, joins: JoinQueue): Promise<void> {
    const events = (await this.docker.getEvents({ filters: { type: ['service'], event: ['create'] } })) as unknown as Readable;
    closer.track(events);
    const wanted = (name: string) => (sel.service === undefined ? name.startsWith(`${sel.project}_`) : name === `${sel.project}_${sel.service}`);
    joinOnEvents(events, closer, joins, (ev) => (wanted(ev.Actor?.Attributes?.name ?? '') ? ev.Actor?.ID : null));
  }

  private async *followAll(
    closer: Closer,
    o: Opened,
    taken: Map<string, Map<string, string>>,
    opts: { floor: bigint; lowest: bigint; notAfter?: string; deadline?: number },
  ): AsyncGenerator<ContainerLogLine[]> {
    const { dir, joins } = o;
    const followers = new Map<string, Follower>();
    const hold = new HoldBack(this.opts.holdMs, HOLD_PULL / 2);
    const timers = new Set<ReturnType<typeof setTimeout>>();
    const wakeup = new Wakeup();
    joins.onSignal = wakeup.wake;
    closer.onClose(wakeup.wake);
    const later = (ms: number, fn: () => void) => {
      const t = setTimeout(() => {
        timers.delete(t);
        fn();
      }, ms);
      timers.add(t);
    };
    if (opts.deadline !== undefined) later(Math.max(0, opts.deadline - Date.now()), wakeup.wake);
    let holdTimer: ReturnType<typeof setTimeout> | undefined;
    const extra = opts.notAfter !== undefined ? { notAfter: opts.notAfter } : {};
    try {
      while (!closer.closed) {
        if (joins.error) throw joins.error;
        for (const id of joins.take()) {
          if (followers.has(id)) continue; // still reading; looked at again when that read ends
          const svc = await dir.service(id);
          if (!svc) continue; // removed
          // After a tail, or read again after a failure: from the earliest task's last line taken, dropping what was.
          const skip = new Map(taken.get(id) ?? []);
          // Never before `lowest`, though: a task that stopped long ago would have its hours read again.
          const earliest = skip.size ? [...skip.values()].map(timestampToNs).reduce((a, b) => (a < b ? a : b)) : opts.floor;
          const resumeNs = earliest > opts.lowest ? earliest : opts.lowest;
          const ref = { id, name: svc.name, service: svc.service, tty: svc.tty };
          const params = { follow: true, since: engineTime(resumeNs) };
          const src = await this.source(closer, `/services/${encodeURIComponent(id)}/logs`, ref, params, { ...extra, makeLine: dir.serviceLine(svc, o.taskFilter) });
          if (!src) continue;
          src.onActivity = wakeup.wake;
          followers.set(id, { src, skip });
        }

        const now = Date.now();
        for (const [id, f] of followers) {
          let mine = taken.get(id);
          while (f.src.hasLine()) {
            const line = f.src.shift()!;
            const task = taskIdOf(line.container);
            const seen = f.skip.get(task);
            if (seen !== undefined && line.timestamp <= seen) continue;
            if (!mine) taken.set(id, (mine = new Map()));
            if ((mine.get(task) ?? '') < line.timestamp) mine.set(task, line.timestamp);
            hold.add(line, now);
            if (hold.size >= HOLD_PULL) break; // the rest stays in the source, whose read-ahead is bounded
          }
        }
        const over = opts.deadline !== undefined && now >= opts.deadline;
        const due = over ? hold.drain(LIVE_BATCH) : hold.take(now, LIVE_BATCH);
        if (due.length) {
          await dir.resolve(due);
          yield due;
          continue;
        }
        if (over) return;

        for (const [id, f] of followers) {
          if (!f.src.ended || f.src.hasLine()) continue;
          followers.delete(id);
          closer.untrack(f.src);
          if (f.src.error) this.opts.warn?.({ service: f.src.ref.name, err: f.src.error.message }, 'a service log stream failed; it is read again while the service exists');
          later(500, () => joins.add(id)); // read again, unless the service is gone
        }
        const next = hold.nextDue();
        clearTimeout(holdTimer);
        if (next !== undefined) holdTimer = setTimeout(wakeup.wake, Math.max(1, next - Date.now()));
        await wakeup.wait();
      }
    } finally {
      clearTimeout(holdTimer);
      for (const t of timers) clearTimeout(t);
      for (const f of followers.values()) f.src.destroy();
    }
  }
}
