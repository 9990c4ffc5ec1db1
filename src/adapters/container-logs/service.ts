// The ContainerLogs service: platform container logs from the engine through dockerode,
// demultiplexed, timestamped, scrubbed, merged across containers in timestamp order and followed
// live (docs/adr/0007-container-logs.md). Every engine connection is read with a bounded buffer and
// paused beyond it, so a slow consumer slows the reading down instead of piling lines up in memory.
import type Docker from 'dockerode';
import type { Readable } from 'node:stream';
import type { ContainerLogLine, LogSelection, PlatformContainer } from '../../contracts/ports.ts';
import { joinOnEvents, openLogStream, type LogParams } from './open-logs.ts';
import { LineSource, type ContainerRef, type SourceOptions } from './line-source.ts';
import { Closer, FeedPort, gather, mergeOrdered, Wakeup, type FeedMode, type FeedStart } from './merge.ts';
import { engineTime, NS_PER_MS, nsToTimestamp, timestampToNs } from './time.ts';

const PROJECT_LABEL = 'com.docker.compose.project';
const SERVICE_LABEL = 'com.docker.compose.service';

/** What both log ports (this one, and swarm-service.ts for a Swarm stack) take. */
export interface LogsOptions {
  /** Applied to every line before it leaves the adapter (the installer's secrets). */
  scrub: (line: string) => string;
  /**
   * Raw read-ahead per engine connection of a history read; the connection is paused beyond it.
   * Followers use a quarter of it: live lines come slowly, and there may be many followers.
   */
  bufferBytes?: number;
  /** A line longer than this without a newline is cut and delivered in pieces. */
  maxLineBytes?: number;
  /** Grace after `until` before a following window ends, for lines the engine stamped in time but delivers late. */
  untilGraceMs?: number;
  warn?: (details: Record<string, unknown>, message: string) => void;
}

interface ContainerLogsOptions extends LogsOptions {
  /** Lines a resumed follower reads to find the last line already delivered before it falls back to a `since` scan. */
  resumeWindow?: number;
}

interface ResumePoint {
  /** The last line of this container already read: resume right after it. */
  after?: ContainerLogLine;
  /** Otherwise read from this instant (epoch ns), or from the container's first line when absent. */
  since?: bigint;
}

/** What a feed opened: the containers to read, and those that start later (when it follows). */
interface Opened {
  joins: JoinQueue;
  containers: (PlatformContainer & { labels: Record<string, string> })[];
}

export class ContainerLogs extends FeedPort<Opened> {
  private readonly ttyCache = new Map<string, boolean>();
  private readonly opts: Required<Omit<ContainerLogsOptions, 'warn'>> & Pick<ContainerLogsOptions, 'warn'>;

  constructor(
    private readonly docker: Docker,
    opts: ContainerLogsOptions,
  ) {
    super();
    this.opts = {
      resumeWindow: 2000,
      bufferBytes: 1024 * 1024,
      maxLineBytes: 1024 * 1024,
      untilGraceMs: 1000,
      ...opts,
    };
  }

  protected async open(closer: Closer, sel: LogSelection, follow: boolean): Promise<Opened> {
    // Subscribe to starts before listing, so that a container starting in between is not missed.
    const joins = new JoinQueue();
    if (follow) await this.watchStarts(closer, sel, joins);
    return { joins, containers: await this.list(sel) };
  }

  private async list(sel: LogSelection): Promise<(PlatformContainer & { labels: Record<string, string> })[]> {
    const label = [`${PROJECT_LABEL}=${sel.project}`];
    if (sel.service !== undefined) label.push(`${SERVICE_LABEL}=${sel.service}`);
    const found = await this.docker.listContainers({ all: true, filters: { label } });
    return found
      .map((c) => ({
        id: c.Id,
        name: (c.Names[0] ?? c.Id).replace(/^\//, ''),
        service: c.Labels[SERVICE_LABEL] ?? '',
        state: c.State,
        labels: c.Labels,
      }))
      .filter((c) => sel.containerName === undefined || c.name === sel.containerName)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  private async tty(id: string): Promise<boolean> {
    const cached = this.ttyCache.get(id);
    if (cached !== undefined) return cached;
    const info = await this.docker.getContainer(id).inspect();
    const tty = Boolean(info.Config.Tty);
    if (this.ttyCache.size > 1000) this.ttyCache.clear();
    this.ttyCache.set(id, tty);
    return tty;
  }

  /** Opens `GET /containers/{id}/logs` into `sink`; false when the container no longer exists. */
  private openStream(id: string, params: LogParams, sink: LineSource): Promise<boolean> {
    return openLogStream(this.docker, `/containers/${encodeURIComponent(id)}/logs`, params, sink);
  }

  private async source(
    closer: Closer,
    ref: Omit<ContainerRef, 'tty'>,
    params: Record<string, string | number | boolean>,
    extra: Pick<SourceOptions, 'skipThrough' | 'notAfter'> = {},
  ): Promise<LineSource | null> {
    const maxBytes = params.follow ? Math.ceil(this.opts.bufferBytes / 4) : this.opts.bufferBytes;
    let tty: boolean;
    try {
      tty = await this.tty(ref.id);
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return null; // removed meanwhile
      throw err;
    }
    const src = new LineSource({ ...ref, tty }, { scrub: this.opts.scrub, maxBytes, maxLineBytes: this.opts.maxLineBytes, ...extra });
    closer.track(src);
    if (!(await this.openStream(ref.id, params, src))) {
      closer.untrack(src);
      return null;
    }
    return src;
  }

  private followParams(resume: ResumePoint): { params: Record<string, string | number | boolean>; skip?: SourceOptions['skipThrough'] } {
    if (resume.after) {
      return { params: { follow: true, tail: this.opts.resumeWindow }, skip: { line: resume.after, within: this.opts.resumeWindow } };
    }
    if (resume.since !== undefined) return { params: { follow: true, since: engineTime(resume.since) } };
    return { params: { follow: true, tail: 'all' } };
  }

  protected async *run(closer: Closer, sel: LogSelection, mode: FeedMode, { startNs, follow, joins, containers }: Opened & FeedStart): AsyncGenerator<ContainerLogLine[]> {
    const until = mode.kind === 'window' ? mode.until : undefined;
    const since = mode.kind === 'window' ? mode.since : undefined;

    try {
      // History: a finite read of each container, merged strictly by timestamp.
      const params: Record<string, string | number | boolean> =
        mode.kind === 'tail'
          ? { tail: Math.max(mode.tail, 1) }
          : {
              ...(since !== undefined ? { since: engineTime(since) } : {}),
              // While following, the history ends where the read started; later lines come from the followers.
              ...(follow ? { until: engineTime(startNs) } : until !== undefined ? { until: engineTime(until) } : {}),
            };
      const opened = await Promise.all(containers.map((c) => this.source(closer, c, params)));
      const history = opened.filter((s): s is LineSource => s !== null);
      yield* mergeOrdered(history, closer, mode.kind === 'window' || mode.tail > 0);
      if (!follow || closer.closed) return;

      // Live: one follower per running container, resumed right after the last line the history read.
      const lastLine = new Map<string, ContainerLogLine>();
      for (const s of history) if (s.last) lastLine.set(s.ref.id, s.last);
      const floor = mode.kind === 'window' ? (since !== undefined && since > startNs ? since : startNs + 1n) : undefined;
      for (const c of containers) if (c.state === 'running') joins.add(c.id);
      yield* this.followAll(closer, sel, joins, lastLine, {
        ...(floor !== undefined ? { floor } : {}),
        ...(until !== undefined ? { notAfter: nsToTimestamp(until), deadline: Number(until / NS_PER_MS) + this.opts.untilGraceMs } : {}),
      });
    } finally {
      closer.close();
    }
  }

  private async watchStarts(closer: Closer, sel: LogSelection, joins: JoinQueue): Promise<void> {
    const label = [`${PROJECT_LABEL}=${sel.project}`];
    if (sel.service !== undefined) label.push(`${SERVICE_LABEL}=${sel.service}`);
    const events = (await this.docker.getEvents({ filters: { type: ['container'], event: ['start'], label } })) as unknown as Readable;
    closer.track(events);
    joinOnEvents(events, closer, joins, (ev) => (sel.containerName === undefined || ev.Actor?.Attributes?.name === sel.containerName ? (ev.Actor?.ID ?? ev.id) : null));
  }

  private async *followAll(
    closer: Closer,
    sel: LogSelection,
    joins: JoinQueue,
    lastLine: Map<string, ContainerLogLine>,
    opts: { floor?: bigint; notAfter?: string; deadline?: number },
  ): AsyncGenerator<ContainerLogLine[]> {
    const followers = new Map<string, LineSource>();
    const rechecks = new Set<ReturnType<typeof setTimeout>>();
    const wakeup = new Wakeup();
    joins.onSignal = wakeup.wake;
    closer.onClose(wakeup.wake);
    const deadlineTimer = opts.deadline === undefined ? undefined : setTimeout(wakeup.wake, Math.max(0, opts.deadline - Date.now()));
    const extra = opts.notAfter !== undefined ? { notAfter: opts.notAfter } : {};
    const add = (src: LineSource | null) => {
      if (!src) return;
      src.onActivity = wakeup.wake;
      followers.set(src.ref.id, src);
    };
    try {
      while (!closer.closed) {
        if (opts.deadline !== undefined && Date.now() >= opts.deadline) return;
        if (joins.error) throw joins.error;

        for (const id of joins.take()) {
          if (followers.has(id)) continue; // still reading; looked at again when that read ends
          const info = await this.inspectOrNull(id);
          if (!info || !info.State.Running) continue;
          const name = info.Name.replace(/^\//, '');
          if (sel.containerName !== undefined && name !== sel.containerName) continue;
          const ref = { id, name, service: info.Config.Labels?.[SERVICE_LABEL] ?? '' };
          const after = lastLine.get(id);
          const { params, skip } = this.followParams(after ? { after } : opts.floor !== undefined ? { since: opts.floor } : {});
          add(await this.source(closer, ref, params, { ...(skip ? { skipThrough: skip } : {}), ...extra }));
        }

        // Everything buffered now, merged by timestamp, each container kept in engine order.
        const batch = gather([...followers.values()], lastLine);
        if (batch.length) {
          yield batch;
          continue;
        }

        for (const [id, s] of followers) {
          if (!s.ended || s.hasLine()) continue;
          followers.delete(id);
          closer.untrack(s);
          const after = lastLine.get(id);
          if (s.gap && after) {
            // The resume line was pushed out of the re-read window: scan from just after it instead.
            add(await this.source(closer, s.ref, { follow: true, since: engineTime(timestampToNs(after.timestamp) + 1n) }, extra));
            continue;
          }
          if (s.error) this.opts.warn?.({ container: s.ref.name, err: s.error.message }, 'a container log stream failed; it is read again if the container runs');
          // The container stopped (or the read failed): look again shortly, in case it restarted.
          const t = setTimeout(() => {
            rechecks.delete(t);
            joins.add(id);
          }, 250);
          rechecks.add(t);
        }
        await wakeup.wait();
      }
    } finally {
      for (const t of rechecks) clearTimeout(t);
      if (deadlineTimer) clearTimeout(deadlineTimer);
      for (const s of followers.values()) s.destroy();
    }
  }

  private async inspectOrNull(id: string): Promise<Docker.ContainerInspectInfo | null> {
    try {
      return await this.docker.getContainer(id).inspect();
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return null;
      throw err;
    }
  }
}

/** Container ids to (re)start following, with a signal when one arrives. */
export class JoinQueue {
  private readonly ids = new Set<string>();
  onSignal: (() => void) | null = null;
  error: Error | null = null;

  add(id: string): void {
    this.ids.add(id);
    this.onSignal?.();
  }

  fail(err: Error): void {
    this.error ??= err;
    this.onSignal?.();
  }

  take(): string[] {
    const ids = [...this.ids];
    this.ids.clear();
    return ids;
  }
}
