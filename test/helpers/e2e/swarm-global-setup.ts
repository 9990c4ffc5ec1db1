// Before the Swarm's test files: the rig, then its multi-node Swarm (test/helpers/e2e/swarm-rig.ts),
// taken down after them if this run made it. A Swarm that cannot form fails every file that needs it.
import { ensureRig } from './rig.ts';
import { swarmForRun } from './swarm-rig.ts';

export default async function setup(): Promise<() => Promise<void>> {
  await ensureRig();
  return swarmForRun();
}
