// The remote build's signature as the update check and the preflight report answer it
// (docs/adr/0053-signed-builds.md): the observer's verdict under the policy, or why there is none.
import { z } from 'zod';
import { NOT_VERIFIED, refusedBySignature, SIGNATURE_POLICIES, SIGNATURE_RESULTS, type SignatureObservation } from '../contracts/signatures.ts';

export const signatureSchema = z
  .object({
    policy: z.enum(SIGNATURE_POLICIES).describe('SIGNATURE_POLICY: off, warn or require'),
    result: z.enum(SIGNATURE_RESULTS).nullable().describe("the remote build's verdict; null when nothing was checked"),
    detail: z.string(),
    keyId: z.string().optional().describe('the trusted key that verified it'),
    refused: z.boolean().describe('true when an update to the remote build would be aborted in preflight (require, not verified)'),
  })
  .describe("the remote build's signature (docs/adr/0053-signed-builds.md)");

/** The answer's `signature`: the observer's verdict, or why there is none. */
export function signatureAnswer(seen: SignatureObservation | undefined): z.infer<typeof signatureSchema> {
  if (!seen || seen.policy === 'off') return { policy: 'off', result: null, detail: NOT_VERIFIED, refused: false };
  if (!seen.verdict) return { policy: seen.policy, result: null, detail: "nothing to verify: the channel's newest build is not known", refused: false };
  const { result, detail, keyId } = seen.verdict;
  return { policy: seen.policy, result, detail, ...(keyId ? { keyId } : {}), refused: refusedBySignature(seen) };
}
