// The measurement of a self-update's downtime: its two ends (the old backend's last answer, the new
// backend's first readiness) and the rule that an unknown or untrustworthy end gives null with a
// reason, never a number.
import { describe, expect, it } from 'vitest';
import { downtimeOf, NO_FIRST_READY, NO_LAST_ANSWER } from '../../src/state/update-history.ts';
import { LastAnswer } from '../../src/api/last-answer.ts';

const at = (iso: string) => new Date(iso);

describe('downtimeOf', () => {
  it('is the time from the last answer to the first readiness, in milliseconds', () => {
    expect(downtimeOf(at('2026-11-25T10:00:00.000Z'), at('2026-11-25T10:00:02.918Z'))).toEqual({ ms: 2918, note: null });
    expect(downtimeOf(at('2026-11-25T10:00:00.000Z'), at('2026-11-25T10:00:00.000Z'))).toEqual({ ms: 0, note: null });
  });

  it('is null with the reason when an end is unknown', () => {
    expect(downtimeOf(null, at('2026-11-25T10:00:02Z'))).toEqual({ ms: null, note: NO_LAST_ANSWER });
    expect(downtimeOf(at('2026-11-25T10:00:00Z'), null)).toEqual({ ms: null, note: NO_FIRST_READY });
    expect(downtimeOf(null, null)).toEqual({ ms: null, note: `${NO_LAST_ANSWER}; ${NO_FIRST_READY}` });
  });

  it('is null when the ends are out of order (a clock that stepped back), not negative', () => {
    const d = downtimeOf(at('2026-11-25T10:00:05Z'), at('2026-11-25T10:00:01Z'));
    expect(d.ms).toBeNull();
    expect(d.note).toMatch(/ready \(2026-11-25T10:00:01\.000Z\) before the old one's last answer \(2026-11-25T10:00:05\.000Z\)/);
  });
});

describe('LastAnswer', () => {
  it('keeps the time of the last answer a client could use: a 5xx does not count', () => {
    const last = new LastAnswer();
    expect(last.at).toBeNull();
    last.note(503, 1_000);
    expect(last.at).toBeNull();
    last.note(200, 2_000);
    last.note(404, 3_000);
    last.note(500, 4_000);
    last.note(503, 5_000);
    expect(last.at).toEqual(new Date(3_000));
  });

  it('an idle backend served until it stopped accepting; an answer in flight then counts when it ends later', () => {
    const last = new LastAnswer();
    const stopped = new Date(10_000);
    expect(last.servedUntil(stopped)).toEqual(stopped);
    last.note(200, 4_000);
    expect(last.servedUntil(stopped)).toEqual(stopped);
    last.note(200, 10_250);
    expect(last.servedUntil(stopped)).toEqual(new Date(10_250));
  });
});
