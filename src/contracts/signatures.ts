// Image signatures as every layer sees them (docs/adr/0053-signed-builds.md): the verdicts, and the
// policy that decides what an unverified build means. The keys are parsed in src/signature-keys.ts.
/** What an unverified build means: not checked, recorded and shown, or refused. */
export const SIGNATURE_POLICIES = ['off', 'warn', 'require'] as const;
export type SignaturePolicy = (typeof SIGNATURE_POLICIES)[number];

/** How a verification ended; `verified` names the key that verified it. */
export const SIGNATURE_RESULTS = ['verified', 'no-signature', 'unknown-key', 'other-digest', 'changed-payload', 'unreachable'] as const;
export type SignatureResult = (typeof SIGNATURE_RESULTS)[number];

export interface SignatureVerdict {
  result: SignatureResult;
  /** One sentence an operator reads: what was found, for which digest, and why it is (not) trusted. */
  detail: string;
  /** The key that verified it (`verified` only). */
  keyId?: string;
}

/** A verification as a policy reads it: `off` checks nothing. */
export type SignatureCheck = { policy: 'off' } | { policy: 'warn' | 'require'; verdict: SignatureVerdict };

/** Checks the signature of `digest` of the repository `reference` names, under the configured policy. */
export interface SignaturePort {
  readonly policy: SignaturePolicy;
  check(reference: string, digest: string): Promise<SignatureCheck>;
}

/** What an install with no key says about its updates, in the check, the transcript and the UI. */
export const NOT_VERIFIED = 'updates are not verified: no signing key is configured (SIGNATURE_PUBLIC_KEYS_FILE)';

/** The channel's newest build's signature as the observer stores it: `verdict` null when off, or when there is no build to check. */
export interface SignatureObservation {
  policy: SignaturePolicy;
  verdict: SignatureVerdict | null;
}

/** Whether preflight would refuse the build observed: under `require`, anything checked and not verified. */
export function refusedBySignature(seen: SignatureObservation | null | undefined): boolean {
  return seen?.policy === 'require' && seen.verdict !== null && seen.verdict.result !== 'verified';
}
