// How the read endpoints use observed state (docs/adr/0023-observed-state.md): the oldest row each
// accepts before it asks the observer for a refresh, and how long it then waits.
import { z } from 'zod';
import type { Settings } from '../config.ts';
import type { FreshnessNeed } from '../state/observed.ts';

/** Longest wait for a refresh of the platform, the installer or the engine. */
const FAST_WAIT_MS = 10_000;
/**
 * Longest wait of the update check for its observation of the channel: above the registry's own
 * timeout (10 s) and the two compose files' reads, which the observer runs beside it.
 */
export const CHANNEL_CHECK_WAIT_MS = 30_000;

export function freshness(settings: Settings): { fast: FreshnessNeed } {
  return { fast: { maxAgeMs: settings.OBSERVED_MAX_AGE_SECONDS * 1000, waitMs: FAST_WAIT_MS } };
}

/** The age fields an answer built from observed state carries. */
export const ageFields = {
  observedAt: z.string().nullable().describe('When the observation this answer comes from began (ISO 8601 UTC); null if never observed'),
  ageMs: z.number().nullable().describe('Age of that observation in milliseconds when answered; null if never observed'),
};
