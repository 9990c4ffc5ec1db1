// The history merge's reorder window: lines a container's log holds slightly out of timestamp order
// (stdout and stderr are copied separately) come out in timestamp order; equal timestamps keep
// the order they arrived in.
import { describe, expect, it } from 'vitest';
import { placeInOrder } from '../../src/adapters/container-logs/index.ts';
import type { ContainerLogLine } from '../../src/contracts/ports.ts';

const line = (timestamp: string, text: string) => ({ timestamp, line: text }) as unknown as ContainerLogLine;

describe('placeInOrder', () => {
  it('sorts by timestamp and keeps arrival order for equal timestamps', () => {
    const window: ContainerLogLine[] = [];
    const arrivals = [
      line('2026-11-22T06:58:53.929137694Z', 'stdout a'),
      line('2026-11-22T06:58:53.929163112Z', 'stdout b'),
      line('2026-11-22T06:58:53.929114501Z', 'stderr earlier'),
      line('2026-11-22T06:58:53.929163112Z', 'tie, arrived later'),
      line('2026-11-22T06:58:53.900000000Z', 'much earlier'),
    ];
    for (const l of arrivals) placeInOrder(window, l);
    expect(window.map((l) => l.line)).toEqual(['much earlier', 'stderr earlier', 'stdout a', 'stdout b', 'tie, arrived later']);
  });
});
