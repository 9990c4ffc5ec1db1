// The count behind the stream caps (src/api/stream-limits.ts): per caller and in all, a refusal
// naming the cap that refused, and a release that counts once however often it is called.
import { describe, expect, it } from 'vitest';
import { callerOf, StreamSlots } from '../../src/api/stream-limits.ts';

describe('stream slots', () => {
  it('refuses past the per-caller cap first, then past the total, and frees a slot once', () => {
    const slots = new StreamSlots({ perPrincipal: 2, total: 3 });
    const a1 = slots.acquire('user a', 'the user a');
    const a2 = slots.acquire('user a', 'the user a');
    expect([typeof a1, typeof a2]).toEqual(['function', 'function']);
    expect(slots.acquire('user a', 'the user a')).toMatchObject({ cap: 'STREAMS_PER_PRINCIPAL', message: expect.stringContaining('the user a already holds 2') });
    const b1 = slots.acquire('user b', 'the user b');
    expect(typeof b1).toBe('function');
    expect(slots.acquire('user c', 'the user c')).toMatchObject({ cap: 'STREAMS_TOTAL', message: expect.stringContaining('already serves 3') });
    expect(slots.total).toBe(3);

    const release = a1 as () => void;
    release();
    release();
    expect([slots.total, slots.of('user a')]).toEqual([2, 1]);
    expect(typeof slots.acquire('user c', 'the user c')).toBe('function');
    (b1 as () => void)();
    (a2 as () => void)();
    expect([slots.total, slots.of('user a'), slots.of('user b')]).toEqual([1, 0, 0]);
  });

  it('counts a user by name, the service token as one caller whatever it forwards, and an anonymous caller by address', () => {
    expect(callerOf({ kind: 'user', username: 'ada', role: 'viewer' }, '10.0.0.1')).toEqual({ key: 'user ada', who: 'the user ada' });
    const forwarded = (id: string | null) => callerOf({ kind: 'service', role: 'operator', forwardedUserId: id, forwardedEmail: null }, '10.0.0.2').key;
    expect(new Set([forwarded('alice'), forwarded('admin'), forwarded(null)])).toEqual(new Set(['service']));
    expect(callerOf(null, '10.0.0.3')).toEqual({ key: 'address 10.0.0.3', who: 'the address 10.0.0.3' });
  });
});
