// The platform on a Swarm (runtime swarm): the nodes, the stack's services with their replicas, and
// the tasks on each node, as the status read last observed them through the manager.
import type { SwarmObservation, SwarmServiceView, SwarmTaskView } from '../../../contracts/swarm.ts';
import { ago, shortDigest, time } from '../format.ts';
import { Badge, Notice, TableScroll } from './common.tsx';

/** `web.2`, or `agent.<node>` for a global service's task (one per node). */
const taskName = (t: SwarmTaskView) => `${t.service}.${t.slot ?? t.node ?? t.nodeId ?? '?'}`;

const replicas = (s: SwarmServiceView) => `${s.runningReplicas ?? '?'}/${s.desiredReplicas ?? '?'}`;

export function SwarmCards(props: { swarm: SwarmObservation | undefined; error: string | undefined }) {
  const { swarm, error } = props;
  return (
    <>
      {error && (
        <Notice tone="bad" testid="swarm-error">
          {error}
        </Notice>
      )}
      {swarm && (
        <>
          <NodesCard swarm={swarm} />
          <ServicesCard swarm={swarm} />
          <TasksCard swarm={swarm} />
        </>
      )}
    </>
  );
}

function NodesCard({ swarm }: { swarm: SwarmObservation }) {
  return (
    <section class="card" aria-labelledby="nodes-title">
      <h2 id="nodes-title">Nodes</h2>
      <TableScroll label="Nodes">
        <table class="table" data-testid="swarm-nodes">
          <thead>
            <tr>
              <th>Node</th>
              <th>Role</th>
              <th>State</th>
              <th>Availability</th>
              <th>Engine</th>
              <th>Address</th>
            </tr>
          </thead>
          <tbody>
            {swarm.nodes.map((n) => (
              <tr key={n.id} data-node={n.hostname}>
                <td>
                  <code title={n.id}>{n.hostname}</code>
                </td>
                <td>
                  {n.role}
                  {n.leader && <span class="muted"> (leader)</span>}
                </td>
                <td>
                  <Badge value={n.state} title={n.message ?? undefined} />
                </td>
                <td>
                  <Badge value={n.availability} />
                </td>
                <td>{n.engineVersion ?? <span class="muted">unknown</span>}</td>
                <td>{n.address ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableScroll>
    </section>
  );
}

function ServicesCard({ swarm }: { swarm: SwarmObservation }) {
  return (
    <section class="card" aria-labelledby="swarm-services-title">
      <h2 id="swarm-services-title">Services</h2>
      {swarm.services.length === 0 ? (
        <p class="muted">The stack has no services on the Swarm. An operator can deploy it.</p>
      ) : (
        <TableScroll label="Services">
          <table class="table" data-testid="swarm-services">
            <thead>
              <tr>
                <th>Service</th>
                <th>Mode</th>
                <th>Replicas</th>
                <th>Update</th>
                <th>Image</th>
              </tr>
            </thead>
            <tbody>
              {swarm.services.map((s) => (
                <tr key={s.id} data-service={s.service}>
                  <td>
                    <code title={s.name}>{s.service}</code>
                  </td>
                  <td>{s.mode}</td>
                  <td data-testid="replicas">
                    <span class={`badge tone-${s.runningReplicas === s.desiredReplicas ? 'ok' : 'warn'}`}>{replicas(s)}</span>
                  </td>
                  <td>{s.updateState ? <Badge value={s.updateState} title={s.updateMessage ?? undefined} /> : <span class="muted">none</span>}</td>
                  <td class="ellipsis" title={`${s.image}${s.digest ? `\n${s.digest}` : ''}`}>
                    {s.image} <span class="muted">{s.digest ? shortDigest(s.digest) : ''}</span>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
    </section>
  );
}

function TasksCard({ swarm }: { swarm: SwarmObservation }) {
  return (
    <section class="card" aria-labelledby="tasks-title">
      <h2 id="tasks-title">Tasks</h2>
      {swarm.tasks.length === 0 ? (
        <p class="muted">No tasks.</p>
      ) : (
        <TableScroll label="Tasks">
          <table class="table" data-testid="swarm-tasks">
            <thead>
              <tr>
                <th>Task</th>
                <th>Node</th>
                <th>State</th>
                <th>Desired</th>
                <th>Since</th>
                <th>Error</th>
              </tr>
            </thead>
            <tbody>
              {swarm.tasks.map((t) => (
                <tr key={t.id} data-task={taskName(t)} data-current={String(t.current)}>
                  <td>
                    <code title={t.id}>
                      {t.current ? '' : '\\_ '}
                      {taskName(t)}
                    </code>
                  </td>
                  <td>{t.node ?? <span class="muted">unassigned</span>}</td>
                  <td>
                    <Badge value={t.state} title={t.message ?? undefined} />
                  </td>
                  <td>{t.desiredState}</td>
                  <td title={time(t.timestamp)}>{ago(t.timestamp)}</td>
                  <td class="ellipsis" title={t.error ?? ''}>
                    {t.error ?? ''}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableScroll>
      )}
    </section>
  );
}
