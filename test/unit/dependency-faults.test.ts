// The small decisions behind dependency faults (docs/adr/0012-dependency-faults.md): which errors
// mean "the database is unavailable", which CLI lines mean "no engine", which engine compose talks
// to, and how a broken registry's answer is made readable.
import { describe, expect, it } from 'vitest';
import { isDatabaseUnavailable } from '../../src/errors.ts';
import { composeEnv, engineUnreachable } from '../../src/adapters/compose-cli.ts';
import { registryMessage } from '../../src/adapters/engine-errors.ts';

const netError = (code: string, address: string, port?: number) => Object.assign(new Error(`connect ${code} ${address}`), { code, address, syscall: 'connect', ...(port ? { port } : {}) });

describe('isDatabaseUnavailable', () => {
  it('is true for a database that is gone, starting, full or too slow', () => {
    for (const err of [
      netError('ECONNREFUSED', '127.0.0.1', 5432),
      netError('ECONNRESET', '10.0.0.5', 5432),
      netError('ENOENT', '/var/run/postgresql/.s.PGSQL.5432'),
      Object.assign(new AggregateError([netError('ECONNREFUSED', '::1', 5432), netError('ECONNREFUSED', '127.0.0.1', 5432)]), { code: 'ECONNREFUSED' }),
      Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }),
      Object.assign(new Error('the database system is starting up'), { code: '57P03' }),
      Object.assign(new Error('sorry, too many clients already'), { code: '53300' }),
      Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' }),
      Object.assign(new Error('connection failure'), { code: '08006' }),
      new Error('Connection terminated unexpectedly'),
      new Error('timeout exceeded when trying to connect'),
      new Error('Query read timeout'),
      new Error('Client has encountered a connection error and is not queryable'),
    ]) {
      expect([err.message, isDatabaseUnavailable(err)]).toEqual([err.message, true]);
    }
  });

  it('is false for the engine socket, query errors and anything else', () => {
    for (const err of [
      netError('ENOENT', '/var/run/docker.sock'),
      netError('ECONNREFUSED', '/run/user/docker.sock'),
      Object.assign(new Error('duplicate key value violates unique constraint'), { code: '23505' }),
      Object.assign(new Error('relation "x" does not exist'), { code: '42P01' }),
      Object.assign(new Error('ENOENT: no such file or directory'), { code: 'ENOENT', path: '/data/x' }),
      new Error('Internal thing went wrong'),
      null,
      'a string',
    ]) {
      expect(isDatabaseUnavailable(err)).toBe(false);
    }
  });
});

describe('compose and the engine', () => {
  it('gives compose the engine the DOCKER_SOCKET setting names', () => {
    expect(composeEnv({}, { dockerSocket: '/srv/docker.sock' }).DOCKER_HOST).toBe('unix:///srv/docker.sock');
    // The setting wins over a DOCKER_HOST the process inherited: compose and dockerode must agree.
    expect(composeEnv({ DOCKER_HOST: 'tcp://10.0.0.1:2375' }, { dockerSocket: '/srv/docker.sock' }).DOCKER_HOST).toBe('unix:///srv/docker.sock');
    expect(composeEnv({ PATH: '/bin' }, {}).DOCKER_HOST).toBeUndefined();
  });

  it('recognises the CLI saying it cannot reach the engine', () => {
    expect(engineUnreachable('Cannot connect to the Docker daemon at unix:///tmp/d.sock. Is the docker daemon running?')).toBe(true);
    expect(engineUnreachable('error during connect: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.41/containers/json": dial unix /var/run/docker.sock: connect: no such file or directory')).toBe(true);
    expect(engineUnreachable(' Container platform-web-1  Restarting')).toBe(false);
    expect(engineUnreachable('Error response from daemon: No such container: abc')).toBe(false);
  });
});

describe('registryMessage', () => {
  it('drops the bytes of a non-HTTP answer and keeps the message printable and short', () => {
    const raw = 'Get "http://127.0.0.1:1/v2/": net/http: HTTP/1.x transport connection broken: malformed HTTP response "U\\x84\u00e9\u04b8\u0007"';
    expect(registryMessage(raw)).toBe('Get "http://127.0.0.1:1/v2/": net/http: HTTP/1.x transport connection broken: malformed HTTP response (the answer is not HTTP)');
    expect(registryMessage('bad \u0007 char é')).toBe('bad ? char ?');
    const long = registryMessage('x'.repeat(1000));
    expect(long).toHaveLength(303);
    expect(long.endsWith('...')).toBe(true);
    expect(registryMessage('received unexpected HTTP status: 500 Internal Server Error')).toBe('received unexpected HTTP status: 500 Internal Server Error');
  });
});
