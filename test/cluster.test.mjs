// Keel nodes on a real Apache Kafka cluster (3 brokers, KRaft, on loopback, started once for the
// file): the partition logs and the metadata live in Kafka, so a node's disk is a copy. A node
// is SIGKILLed and a new one with an empty disk takes its place: every acknowledged invocation
// completes exactly once, no recorded step runs again, object state is the fold of its calls.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKafkaCluster } from './helpers/kafka-cluster.mjs';
import { startKeel, serveServices, register, ingress, eventually, adminCall as admin } from './helpers/keel.mjs';

const kafka = await startKafkaCluster(t, { brokers: 3 });
let topics = 0;

/** Each recorded step's runs, by the id the caller gave it. */
const stepRuns = new Map();
const steps = restate.service({
  name: 'Steps',
  handlers: {
    run: async (ctx, { id }) => {
      await ctx.run('step', () => void stepRuns.set(id, (stepRuns.get(id) ?? 0) + 1));
      return `done ${id}`;
    },
  },
});
const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, n) => {
      const next = ((await ctx.get('count')) ?? 0) + n;
      ctx.set('count', next);
      return next;
    },
    get: restate.handlers.object.shared(async (ctx) => (await ctx.get('count')) ?? 0),
  },
});
const endpoint = await serveServices(t, [steps, counter]);

/** A Keel node of the cluster on `topic`, with its own (empty) directory. */
function node(t, name, topic) {
  return startKeel(t, {
    env: {
      KEEL_CLUSTER__BROKERS: kafka.brokers.join(','),
      KEEL_CLUSTER__NODE_NAME: name,
      KEEL_CLUSTER__LOG_TOPIC: topic,
      KEEL_WORKER__PARTITIONS: '4',
    },
  });
}

t.test('a SIGKILLed node is replaced by a node with an empty disk: nothing acknowledged is lost or done twice', async (t) => {
  const topic = `keel-${++topics}`;
  const a = await node(t, 'a', topic);
  await register(a, endpoint);
  const calls = await Promise.all(Array.from({ length: 20 }, (_, i) => ingress(a, '/Steps/run', { id: `call-${i}` })));
  t.same(calls.map((c) => c.status), Array(20).fill(200), 'twenty calls answered by node a');
  let sum = 0;
  for (let i = 1; i <= 10; i++) {
    const res = await ingress(a, '/Counter/k/add', i);
    sum += i;
    t.equal(res.body, sum);
  }
  // Delayed sends: accepted by a, due after a is gone.
  const sends = await Promise.all(Array.from({ length: 10 }, (_, i) => ingress(a, '/Steps/run/send?delay=3s', { id: `later-${i}` })));
  t.same(sends.map((s) => s.status), Array(10).fill(202), 'ten delayed sends accepted');
  const killedAt = Date.now();
  await a.kill('SIGKILL');

  const b = await node(t, 'b', topic);
  const { json: deployments } = await admin(b, 'GET', '/deployments');
  t.equal(deployments.deployments?.length, 1, 'the deployment registered on a is known to b (the metadata log)');
  t.equal((await ingress(b, '/Counter/k/get')).body, sum, "the object's state is the fold of its ten calls");
  t.comment(`b answered ${Date.now() - killedAt} ms after a was SIGKILLed (its start included)`);
  await eventually(() => [...Array(10).keys()].every((i) => stepRuns.get(`later-${i}`) === 1), { timeout_ms: 20_000 });
  t.pass('every delayed send ran on b, once');
  t.same([...Array(20).keys()].map((i) => stepRuns.get(`call-${i}`)), Array(20).fill(1), 'no recorded step of the calls ran again');
  const more = await ingress(b, '/Counter/k/add', 100);
  t.equal(more.body, sum + 100, 'b goes on from the state a left');
  await b.stop();
});

t.test('deployments registered on one node are applied by the others as they follow the metadata log', async (t) => {
  const topic = `keel-${++topics}`;
  const a = await node(t, 'a', topic);
  await register(a, endpoint);
  // b starts with the deployment (read at start); a change made on b reaches a while it runs.
  const b = await node(t, 'b', topic);
  const { json: listed } = await admin(b, 'GET', '/deployments');
  t.equal(listed.deployments?.length, 1);
  const id = listed.deployments[0].id;
  const removed = await admin(b, 'DELETE', `/deployments/${id}?force=true`);
  t.ok(removed.status < 300, `removed on b (${removed.status})`);
  await eventually(async () => (await admin(a, 'GET', '/deployments')).json.deployments?.length === 0);
  t.pass('a applied the removal b wrote');
  await a.kill('SIGKILL');
  await b.kill('SIGKILL');
});
