// The conformance scenarios (test/services/conformance-suite.mjs) through every node of a Keel
// cluster: three nodes on a real Apache Kafka cluster (3 brokers, KRaft, on loopback), the
// partitions spread over them, each request of the suite sent to the next node in turn — so a
// call, its attach, its admin command and its SQL row are mostly asked of different nodes, and
// calls between objects cross nodes. KillRuntime SIGKILLs one node and starts it again.
import t from 'tap';
import { startKafkaCluster } from './helpers/kafka-cluster.mjs';
import { startKeel, register, eventually, adminCall as admin } from './helpers/keel.mjs';
import { conformanceServices } from './services/conformance-services.mjs';
import { lockObj } from './services/cancel-services.mjs';
import { serveDroppable, FAST_RETRY, ALWAYS_SUSPEND } from './services/invocation-helpers.mjs';
import { conformanceSuite } from './services/conformance-suite.mjs';

const kafka = await startKafkaCluster(t, { brokers: 3 });
const PARTITIONS = 6;

/** The nodes, asked in turn: each read of `ingress` or `admin` is the next node's. */
function inTurn(nodes) {
  let next = 0;
  const node = () => nodes[next++ % nodes.length];
  return {
    get ingress() {
      return node().ingress;
    },
    get admin() {
      return node().admin;
    },
    logs: () => nodes.map((n) => n.logs()).join('\n'),
    /** A SIGKILL of the first node, started again at once on its own disk. */
    restart: () => nodes[0].restart(),
  };
}

let topics = 0;
for (const [mode, modeEnv] of [['default', {}], ['always-suspending', ALWAYS_SUSPEND]]) {
  t.test(`conformance through the nodes of a cluster (${mode})`, async (t) => {
    const topic = `keel-conformance-${++topics}`;
    const env = (name) => ({
      KEEL_WORKER__PARTITIONS: String(PARTITIONS), ...FAST_RETRY, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '5', ...modeEnv,
      KEEL_CLUSTER__BROKERS: kafka.brokers.join(','), KEEL_CLUSTER__NODE_NAME: name, KEEL_CLUSTER__LOG_TOPIC: topic, KEEL_CLUSTER__SESSION_TIMEOUT: '2s',
    });
    const nodes = [];
    for (const name of ['a', 'b', 'c']) nodes.push(await startKeel(t, { env: env(name) }));
    await eventually(async () => {
      const leaders = (await admin(nodes[2], 'GET', '/cluster')).json?.partitions?.map((p) => p.leader) ?? [];
      return leaders.length === PARTITIONS && ['a', 'b', 'c'].every((n) => leaders.includes(n));
    }, { timeout_ms: 40_000, interval_ms: 200 });
    const endpoint = await serveDroppable(t, [...conformanceServices, lockObj]);
    await register(nodes[0], endpoint.uri);
    await eventually(async () => (await Promise.all(nodes.map(async (k) => (await admin(k, 'GET', '/deployments')).json?.deployments?.length))).every((n) => n === 1));
    conformanceSuite(t, inTurn(nodes), endpoint, { suspends: mode === 'always-suspending' });
  });
}
