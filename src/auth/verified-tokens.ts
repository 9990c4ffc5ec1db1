// Verified sign-in tokens, kept until they expire. Every request of a signed-in client carries
// the same token, and verifying its signature again each time costs more than the rest of the
// authentication. The key is the whole token string, so two different tokens never share an
// entry; only successful verifications are kept, and an entry is never used at or after the
// token's `exp`.

export interface VerifiedClaims {
  sub?: unknown;
  role?: unknown;
  exp?: unknown;
}

export class VerifiedTokens<C extends VerifiedClaims = VerifiedClaims> {
  private readonly entries = new Map<string, { claims: C; expiresAtMs: number }>();

  constructor(
    private readonly maxEntries: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** The claims of `token` if it was verified before and has not expired. */
  get(token: string): C | undefined {
    const e = this.entries.get(token);
    if (!e) return undefined;
    if (this.now() >= e.expiresAtMs) {
      this.entries.delete(token);
      return undefined;
    }
    return e.claims;
  }

  /** Keeps a token whose signature and expiry were just verified; one without `exp` is not kept. */
  set(token: string, claims: C): void {
    if (typeof claims.exp !== 'number' || !Number.isFinite(claims.exp)) return;
    const expiresAtMs = claims.exp * 1000;
    if (this.now() >= expiresAtMs) return;
    this.entries.delete(token);
    if (this.entries.size >= this.maxEntries) {
      // Oldest first: the Map keeps insertion order.
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(token, { claims, expiresAtMs });
  }

  get size(): number {
    return this.entries.size;
  }
}
