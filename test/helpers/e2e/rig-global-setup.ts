// Before any Docker test: the real engine, Compose and registry must be up, or every Docker test fails loudly.
import { ensureRig } from './rig.ts';

export default async function setup(): Promise<void> {
  await ensureRig();
}
