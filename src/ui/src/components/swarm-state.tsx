// The platform on a Swarm (runtime swarm): the nodes, the stack's services with their replicas, and
// the tasks on each node, as the status read last observed them through the manager.
import type { ComponentChildren } from 'preact';
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

/** A card with a title and one table: the headers, and the rows or, when there are none, a line saying so. */
function TableCard(props: { id: string; title: string; testid: string; headers: string[]; empty?: string; rows: ComponentChildren[] }) {
  const { id, title, testid, headers, empty, rows } = props;
  return (
    <section class="card" aria-labelledby={id}>
      <h2 id={id}>{title}</h2>
      {rows.length === 0 && empty !== undefined ? (
        <p class="muted">{empty}</p>
      ) : (
        <TableScroll label={title}>
          <table class="table" data-testid={testid}>
            <thead>
              <tr>
                {headers.map((h) => (
                  <th key={h}>{h}</th>
                ))}
              </tr>
            </thead>
            <tbody>{rows}</tbody>
          </table>
        </TableScroll>
      )}
    </section>
  );
}

function NodesCard({ swarm }: { swarm: SwarmObservation }) {
  return (
    <TableCard
      id="nodes-title"
      title="Nodes"
      testid="swarm-nodes"
      headers={['Node', 'Role', 'State', 'Availability', 'Engine', 'Address']}
      rows={swarm.nodes.map((n) => (
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
    />
  );
}

function ServicesCard({ swarm }: { swarm: SwarmObservation }) {
  return (
    <TableCard
      id="swarm-services-title"
      title="Services"
      testid="swarm-services"
      headers={['Service', 'Mode', 'Replicas', 'Update', 'Image']}
      empty="The stack has no services on the Swarm. An operator can deploy it."
      rows={swarm.services.map((s) => (
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
    />
  );
}

function TasksCard({ swarm }: { swarm: SwarmObservation }) {
  return (
    <TableCard
      id="tasks-title"
      title="Tasks"
      testid="swarm-tasks"
      headers={['Task', 'Node', 'State', 'Desired', 'Since', 'Error']}
      empty="No tasks."
      rows={swarm.tasks.map((t) => (
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
    />
  );
}
