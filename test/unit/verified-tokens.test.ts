// The cache of verified sign-in tokens: exact keys, never past expiry, bounded.
import { describe, expect, it } from 'vitest';
import { VerifiedTokens } from '../../src/auth/verified-tokens.ts';

function clock(startMs: number) {
  let t = startMs;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe('VerifiedTokens', () => {
  it('gives back the claims of the same token only', () => {
    const c = clock(1_000_000);
    const v = new VerifiedTokens(10, c.now);
    const claims = { sub: 'ada', role: 'admin', exp: 2_000 };
    v.set('aaa.bbb.ccc', claims);
    expect(v.get('aaa.bbb.ccc')).toBe(claims);
    expect(v.get('aaa.bbb.cc')).toBeUndefined();
    expect(v.get('aaa.bbb.ccc ')).toBeUndefined();
    expect(v.get('AAA.bbb.ccc')).toBeUndefined();
  });

  it('never answers at or after the expiry, and forgets the entry', () => {
    const c = clock(1_000_000);
    const v = new VerifiedTokens(10, c.now);
    v.set('t', { sub: 'ada', role: 'admin', exp: 1_060 });
    c.advance(59_999);
    expect(v.get('t')).toBeDefined();
    c.advance(1);
    expect(v.get('t')).toBeUndefined();
    expect(v.size).toBe(0);
  });

  it('keeps no token without a numeric expiry, nor one already expired', () => {
    const c = clock(1_000_000);
    const v = new VerifiedTokens(10, c.now);
    v.set('no-exp', { sub: 'ada', role: 'admin' });
    v.set('string-exp', { sub: 'ada', role: 'admin', exp: '9999999999' });
    v.set('nan-exp', { sub: 'ada', role: 'admin', exp: Number.NaN });
    v.set('expired', { sub: 'ada', role: 'admin', exp: 1_000 });
    expect(v.size).toBe(0);
    expect(v.get('no-exp')).toBeUndefined();
    expect(v.get('expired')).toBeUndefined();
  });

  it('holds at most its bound, dropping the oldest entry first', () => {
    const c = clock(0);
    const v = new VerifiedTokens(3, c.now);
    for (const t of ['a', 'b', 'c']) v.set(t, { exp: 100 });
    v.set('a', { exp: 100 }); // set again: now the newest
    v.set('d', { exp: 100 });
    expect(v.size).toBe(3);
    expect(v.get('b')).toBeUndefined();
    expect(['a', 'c', 'd'].map((t) => v.get(t) !== undefined)).toEqual([true, true, true]);
  });
});
