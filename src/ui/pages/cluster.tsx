// The cluster this node belongs to (GET /cluster, answered by the node asked): its role, the
// members, and per partition its leader, the leader epoch, the applied position and how far this
// node's copy is behind the partition's Kafka log. A node without [cluster] says it runs alone.

import { api, ApiError } from '../api';
import { Badge, ErrorBox, Loading, useAsync } from '../components';

interface PartitionView {
  partition: number;
  leader?: string;
  leader_epoch?: number;
  applied_position?: number;
  log_end_offset?: number;
  applied_offset?: number;
  lag_offsets?: number;
}

interface ClusterView {
  node: string;
  role: 'standby' | 'activating' | 'active' | 'leading';
  active_node?: string;
  members: string[];
  partitions: PartitionView[];
}

/** undefined: this node is not in a cluster (GET /cluster is not served: 404). */
async function load(): Promise<ClusterView | undefined> {
  try {
    return (await api<ClusterView>('GET', '/cluster')).data;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return undefined;
    throw err;
  }
}

/** "a leads every partition", or how many each node leads: "a 2, b 2, c 2". */
function leaders(c: ClusterView): string {
  if (c.active_node !== undefined) return `${c.active_node} leads every partition`;
  const counts = new Map<string, number>();
  for (const p of c.partitions) counts.set(p.leader ?? 'none yet', (counts.get(p.leader ?? 'none yet') ?? 0) + 1);
  return [...counts].sort(([a], [b]) => (a < b ? -1 : 1)).map(([node, n]) => `${node} ${n}`).join(', ');
}

const show = (n: number | undefined) => (n === undefined ? '–' : n.toLocaleString('en-US'));

export function ClusterPage() {
  const view = useAsync(load, [], 2000);
  if (view.error) return <ErrorBox error={view.error} />;
  if (view.loading && view.data === undefined) return <Loading />;
  const c = view.data;
  if (c === undefined) {
    return (
      <div class="narrow">
        <h1>Cluster</h1>
        <p id="single-node">
          This node runs alone: its partition logs and metadata are in its own store. Set <code>[cluster] brokers</code> to run it as a node of a
          cluster on Apache Kafka (README, "Run a cluster").
        </p>
      </div>
    );
  }
  return (
    <div>
      <h1>Cluster</h1>
      <p class="muted">
        Answered by this node. Each partition has one leader; every node answers every request, forwarding what needs a partition it does not lead
        to that partition's leader, and follows the logs of the partitions it does not lead into its own store. Lag: offsets of a partition's
        Kafka log this node has not applied yet.
      </p>
      <dl class="kv" id="cluster-node">
        <dt>This node</dt>
        <dd class="mono">{c.node}</dd>
        <dt>Role</dt>
        <dd>
          <Badge value={c.role} kind={c.role === 'active' || c.role === 'leading' ? 'ok' : c.role === 'activating' ? 'run' : 'wait'} />
        </dd>
        <dt>Leaders</dt>
        <dd class="mono" id="leaders">
          {leaders(c)}
        </dd>
        <dt>Members</dt>
        <dd class="mono" id="cluster-members">
          {c.members.join(', ')}
        </dd>
      </dl>
      <div class="table-wrap">
        <table class="data" id="cluster-partitions">
          <thead>
            <tr>
              <th>partition</th>
              <th>leader</th>
              <th>leader epoch</th>
              <th>applied position</th>
              <th>applied offset</th>
              <th>log end offset</th>
              <th>lag</th>
            </tr>
          </thead>
          <tbody>
            {c.partitions.map((p) => (
              <tr>
                <td class="mono">{p.partition}</td>
                <td class="mono">{p.leader ?? 'none yet'}</td>
                <td class="mono">{show(p.leader_epoch)}</td>
                <td class="mono">{show(p.applied_position)}</td>
                <td class="mono">{show(p.applied_offset)}</td>
                <td class="mono">{show(p.log_end_offset)}</td>
                <td class="mono">{show(p.lag_offsets)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  );
}
