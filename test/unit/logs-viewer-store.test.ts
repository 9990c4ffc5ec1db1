// The logs viewer's ring of lines and its filtered view (src/ui/src/logs/store.ts), and how it shows
// timestamps (src/ui/src/logs/time.ts): plain TypeScript, no browser.
import { describe, expect, it } from 'vitest';
import { FilteredView, LogStore, matcher, NO_FILTER, type LogLine } from '../../src/ui/src/logs/store.ts';
import { formatTime } from '../../src/ui/src/logs/time.ts';

const line = (i: number, service = 'api', stderr = false): LogLine => ({
  container: `p-${service}-1`,
  service,
  stream: stderr ? 'stderr' : 'stdout',
  timestamp: '2024-05-01T10:00:00.000000000Z',
  line: i % 2 ? `\x1b[31mline ${i}\x1b[0m` : `line ${i}`,
});

describe('LogStore', () => {
  it('keeps the newest lines up to its capacity and counts the dropped ones', () => {
    const s = new LogStore(5);
    for (let i = 0; i < 8; i++) s.push(line(i));
    expect(s.size).toBe(5);
    expect(s.first).toBe(3);
    expect(s.at(s.first).plain).toBe('line 3');
    expect(s.at(s.next - 1).plain).toBe('line 7');
    expect(s.at(s.next - 1).line).toBe('\x1b[31mline 7\x1b[0m');
    s.skip(10);
    expect(s.size).toBe(0);
    expect(s.first).toBe(18);
    s.push(line(1));
    expect(s.at(18).plain).toBe('line 1');
    const g = s.generation;
    s.clear();
    expect([s.size, s.first, s.generation, s.sources.size]).toEqual([0, 0, g + 1, 0]);
  });

  it('lists services as seen, a container without one by its name', () => {
    const s = new LogStore(10);
    s.push(line(0, 'web'));
    s.push({ ...line(1), service: '', container: 'loose' });
    expect([...s.sources]).toEqual(['web', 'loose']);
  });
});

describe('FilteredView', () => {
  it('is the store itself without a filter', () => {
    const s = new LogStore(4);
    for (let i = 0; i < 6; i++) s.push(line(i));
    const v = new FilteredView(s, matcher(NO_FILTER));
    expect(v.length).toBe(4);
    expect(v.seqAt(0)).toBe(2);
    expect(v.indexOf(3)).toBe(1);
  });

  it('matches text in any case without escape codes, services and streams, and follows new and dropped lines', () => {
    const s = new LogStore(6);
    const v = new FilteredView(s, matcher({ ...NO_FILTER, text: 'LINE 1' }));
    for (let i = 0; i < 12; i++) s.push(line(i));
    v.sync();
    // line 1, line 10, line 11 match; line 1 was dropped (seqs 6..11 held).
    expect(Array.from({ length: v.length }, (_, i) => v.seqAt(i))).toEqual([10, 11]);
    expect(v.indexOf(7)).toBe(0);
    expect(v.indexOf(11)).toBe(1);
    expect(v.indexOf(12)).toBe(2);

    const t = new LogStore(10);
    t.push(line(0, 'api'));
    t.push(line(1, 'web', true));
    t.push(line(2, 'worker'));
    const only = (f: Parameters<typeof matcher>[0]) => {
      const w = new FilteredView(t, matcher(f));
      return Array.from({ length: w.length }, (_, i) => t.at(w.seqAt(i)).source);
    };
    expect(only({ ...NO_FILTER, stdout: false })).toEqual(['web']);
    expect(only({ ...NO_FILTER, stderr: false })).toEqual(['api', 'worker']);
    expect(only({ ...NO_FILTER, hidden: new Set(['api', 'web']) })).toEqual(['worker']);
    expect(only({ ...NO_FILTER, text: '[31m' })).toEqual([]);
  });
});

describe('formatTime', () => {
  it('shows HH:MM:SS.mmm in UTC or in the local zone', () => {
    expect(formatTime('2024-05-01T10:00:00.123456789Z', true)).toBe('10:00:00.123');
    expect(formatTime('2024-05-01T10:00:00Z', true)).toBe('10:00:00.000');
    expect(formatTime('2024-05-01T10:00:00.5Z', true)).toBe('10:00:00.500');
    const local = new Date(Date.UTC(2024, 4, 1, 10, 0, 0, 123));
    const pad = (n: number) => String(n).padStart(2, '0');
    expect(formatTime('2024-05-01T10:00:00.123456789Z', false)).toBe(`${pad(local.getHours())}:${pad(local.getMinutes())}:${pad(local.getSeconds())}.123`);
    expect(formatTime('not a time', true)).toBe('not a time');
  });
});
