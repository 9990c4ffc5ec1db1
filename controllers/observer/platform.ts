// The observer's reading of the platform's row (docs/adr/0023-observed-state.md): a Compose
// project's containers, or, with PLATFORM_RUNTIME=swarm, the Swarm's nodes and the stack's services
// and tasks read through the manager, each beside the service list of the compose file. A failed
// read is recorded in the row and its conditions, never thrown.
import type { ContainerView, PlatformPort } from '../../src/contracts/ports.ts';
import { NOT_A_MANAGER, type SwarmObservation } from '../../src/contracts/swarm.ts';
import type { ObservedCondition, ObservedData } from '../../src/state/observed.ts';

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

export function engineCondition(failure: unknown, at: string): ObservedCondition {
  return failure
    ? { type: 'EngineReachable', status: 'False', reason: 'EngineUnreachable', message: message(failure), observedAt: at }
    : { type: 'EngineReachable', status: 'True', reason: 'EngineAnswered', message: 'the engine answered', observedAt: at };
}

export interface PlatformObservation {
  data: ObservedData['platform'];
  conditions: ObservedCondition[];
  /** Every read answered. */
  answered: boolean;
}

/**
 * The stack's containers as the status page lists them: one per current task, on whichever node it
 * runs. The engine's own container list would hold only the manager's share of the replicas (and
 * none by the compose project label the Compose runtime reads), so the tasks, which the manager
 * knows for every node, stand in for it. Names are the ones the Swarm gives the task containers
 * (`<stack>_<service>.<slot or node id>.<task id>`); health is not known to the manager, so it is null.
 */
export function taskContainers(swarm: SwarmObservation): ContainerView[] {
  const nameOf = new Map(swarm.services.map((s) => [s.id, s.name]));
  return swarm.tasks
    .filter((t) => t.current)
    .map((t) => ({
      name: `${nameOf.get(t.serviceId) ?? t.service}.${t.slot ?? t.nodeId ?? ''}.${t.id}`,
      service: t.service,
      state: t.state,
      health: null,
      image: t.image,
      digest: t.digest,
      since: t.timestamp,
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

function servicesCondition(services: PromiseSettledResult<string[]>, at: string): ObservedCondition {
  return services.status === 'fulfilled'
    ? { type: 'ServicesKnown', status: 'True', reason: 'ComposeConfigRead', message: `${services.value.length} services`, observedAt: at }
    : { type: 'ServicesKnown', status: 'False', reason: 'ComposeConfigFailed', message: message(services.reason), observedAt: at };
}

const servicesPart = (services: PromiseSettledResult<string[]>) => ({
  services: services.status === 'fulfilled' ? services.value : null,
  ...(services.status === 'rejected' ? { servicesError: message(services.reason) } : {}),
});

export async function observePlatform(platform: PlatformPort, at: string): Promise<PlatformObservation> {
  return platform.runtime === 'swarm' ? observeStack(platform, at) : observeProject(platform, at);
}

/** The Compose project on this host: its containers by the project label. */
async function observeProject(platform: PlatformPort, at: string): Promise<PlatformObservation> {
  const [containers, services] = await Promise.allSettled([platform.containers(), platform.services()]);
  const data: ObservedData['platform'] = {
    project: platform.project,
    runtime: 'compose',
    containers: containers.status === 'fulfilled' ? containers.value : [],
    ...(containers.status === 'rejected' ? { engineError: `the Docker engine did not answer: ${message(containers.reason)}` } : {}),
    ...servicesPart(services),
  };
  const conditions = [engineCondition(containers.status === 'fulfilled' ? null : containers.reason, at), servicesCondition(services, at)];
  return { data, conditions, answered: containers.status === 'fulfilled' && services.status === 'fulfilled' };
}

/**
 * The stack on the Swarm. An engine that answers but manages no Swarm (a worker, or not in a Swarm)
 * is reachable, and `SwarmReachable` False `NotAManager` says so in the engine's words; an engine
 * that does not answer leaves whether the Swarm is there Unknown.
 */
async function observeStack(platform: PlatformPort, at: string): Promise<PlatformObservation> {
  const [swarm, services] = await Promise.allSettled([platform.swarm(), platform.services()]);
  const notAManager = swarm.status === 'rejected' && (swarm.reason as { code?: string }).code === NOT_A_MANAGER;
  const engineFailure = swarm.status === 'rejected' && !notAManager ? swarm.reason : null;
  const failure = swarm.status === 'rejected' ? message(swarm.reason) : null;
  const data: ObservedData['platform'] = {
    project: platform.project,
    runtime: 'swarm',
    containers: swarm.status === 'fulfilled' ? taskContainers(swarm.value) : [],
    // Why `containers` is not the stack's list, as in the Compose runtime.
    ...(failure ? { engineError: notAManager ? failure : `the Docker engine did not answer: ${failure}`, swarmError: failure } : {}),
    ...servicesPart(services),
    ...(swarm.status === 'fulfilled' ? { swarm: swarm.value } : {}),
  };
  const swarmCondition: ObservedCondition =
    swarm.status === 'fulfilled'
      ? {
          type: 'SwarmReachable',
          status: 'True',
          reason: 'ManagerAnswered',
          message: `${swarm.value.nodes.length} nodes; ${swarm.value.services.length} services of stack ${platform.project}`,
          observedAt: at,
        }
      : notAManager
        ? { type: 'SwarmReachable', status: 'False', reason: 'NotAManager', message: failure!, observedAt: at }
        : { type: 'SwarmReachable', status: 'Unknown', reason: 'EngineUnreachable', message: failure!, observedAt: at };
  return {
    data,
    conditions: [engineCondition(engineFailure, at), swarmCondition, servicesCondition(services, at)],
    answered: swarm.status === 'fulfilled' && services.status === 'fulfilled',
  };
}
