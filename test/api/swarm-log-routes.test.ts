// The container-log routes with PLATFORM_RUNTIME=swarm, against an in-memory ContainerLogsPort:
// names are checked by the feed (the stack it lists) rather than the observed containers, a name
// the stack does not have is 404 (service) or 400 (containerName) before any stream, and lines
// carry their node and task, which the download writes as `<container>@<node>`.
// The real adapter on the rig's Swarm: test/e2e/swarm-logs.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import type { ContainerLogLine, ContainerLogsPort, LogFeed, LogSelection } from '../../src/contracts/ports.ts';

const STACK = 'platform';
const line = (i: number, node: string): ContainerLogLine => ({
  container: `${STACK}_web.${i}.task${i}aaaaaaaaaaaaaaaaaaaaa`,
  service: 'web',
  node,
  task: `web.${i}`,
  stream: 'stdout',
  timestamp: `2024-05-01T10:00:0${i}.000000000Z`,
  line: `web ${node} out ${i}`,
});
const LINES = [line(1, 'vm'), line(2, 'installer-swarm-w1'), line(3, 'installer-swarm-w2')];

/** Knows one service (`web`) and its three tasks' containers, as the Swarm adapter's feed would. */
class StackLogs implements ContainerLogsPort {
  selections: LogSelection[] = [];
  private feed(sel: LogSelection): LogFeed {
    this.selections.push(sel);
    const unknown =
      sel.service !== undefined && sel.service !== 'web'
        ? { parameter: 'service', message: `service "${sel.service}" is not a service of the platform (stack ${STACK})` }
        : sel.containerName !== undefined && !LINES.some((l) => l.container === sel.containerName)
          ? { parameter: 'containerName', message: `containerName: no platform container is named "${sel.containerName}" (stack ${STACK})` }
          : null;
    const opened = unknown ? Promise.reject(Object.assign(new Error(unknown.message), { code: 'log-selection-unknown', parameter: unknown.parameter })) : Promise.resolve();
    opened.catch(() => {});
    const lines = LINES.filter((l) => sel.containerName === undefined || l.container === sel.containerName);
    return {
      opened,
      close: () => {},
      async *[Symbol.asyncIterator]() {
        yield lines;
      },
    };
  }
  live(selection: LogSelection): LogFeed {
    return this.feed(selection);
  }
  window(selection: LogSelection): LogFeed {
    return this.feed(selection);
  }
}

const logs = new StackLogs();
let t: TestApp;
beforeAll(async () => {
  // The observer sees no container of the stack (platformContainers: none): names are not checked against it.
  t = await startTestApp({ logs, platformContainers: () => [], env: { PLATFORM_RUNTIME: 'swarm' } });
});
afterAll(async () => t?.close());

const get = async (url: string, role: 'viewer' | 'admin' = 'admin') => t.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${await t.token(role)}` } });

describe('names on a Swarm', () => {
  it('streams a service the observer has not seen when the stack has it, and 404s one it has not', async () => {
    const ok = await get('/api/deployment/logs/web', 'viewer');
    expect(ok.statusCode).toBe(200);
    expect(parseSse(ok.body).map((e) => e.data)).toEqual(LINES);
    const missing = await get('/api/deployment/logs/queue', 'viewer');
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toEqual({ statusCode: 404, error: 'Not Found', code: 'not_found', message: `service "queue" is not a service of the platform (stack ${STACK})` });
    expect(logs.selections.slice(-2)).toEqual([
      { project: STACK, service: 'web' },
      { project: STACK, service: 'queue' },
    ]);
  });

  it('answers 400 naming containerName for a container the stack does not have, on the window and the download', async () => {
    for (const url of ['/api/deployment-log?containerName=platform_web.9.x', '/api/deployment-log/download?since=2024-05-01T10:00:00Z&containerName=platform_web.9.x']) {
      const res = await get(url);
      expect(res.statusCode, url).toBe(400);
      expect(res.json(), url).toMatchObject({ statusCode: 400, code: 'bad_request', message: expect.stringContaining('containerName: no platform container is named "platform_web.9.x" (stack platform)') });
    }
    const one = await get(`/api/deployment-log?until=2024-05-01T11:00:00Z&containerName=${LINES[1]!.container}`);
    expect(parseSse(one.body).map((e) => e.data)).toEqual([LINES[1], { lines: 1 }]);
  });
});

describe('formats on a Swarm', () => {
  it('sends node and task with each line', async () => {
    const res = await get('/api/deployment/logs', 'viewer');
    for (const e of parseSse(res.body)) expect(Object.keys(e.data)).toEqual(['container', 'service', 'node', 'task', 'stream', 'timestamp', 'line']);
  });

  it('downloads each line as `<container>@<node> | <timestamp> <stream> <line>`', async () => {
    const res = await get('/api/deployment-log/download?since=2024-05-01T10:00:00Z');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(LINES.map((l) => `${l.container}@${l.node} | ${l.timestamp} ${l.stream} ${l.line}\n`).join(''));
  });
});
