// A real Apache Kafka cluster (3 brokers, KRaft, on loopback: test/helpers/kafka-cluster.mjs),
// started once for the file: what a Keel cluster will rest on, measured; and Keel's Kafka
// subscriptions against real brokers, through the loss of the broker leading their partitions.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { ledger, ledgerAdds } from './services/cluster-services.mjs';
import { startKafkaCluster } from './helpers/kafka-cluster.mjs';
import { startKeel, serveServices, register, tempDir, adminCall as admin, eventually } from './helpers/keel.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const cluster = await startKafkaCluster(t, { brokers: 3 });

/** Every record of `topic` from the beginning, as a fresh group reads it (read_committed: what transactions committed). */
async function readAll(topic, expected, { isolation = 'read_committed' } = {}) {
  const consumer = cluster.kafka().consumer({ groupId: `reader-${Math.random().toString(36).slice(2)}`, readUncommitted: isolation !== 'read_committed', sessionTimeout: 6000, heartbeatInterval: 300 });
  await consumer.connect();
  const seen = [];
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({ eachMessage: async ({ partition, message }) => void seen.push({ partition, offset: Number(message.offset), value: message.value.toString() }) });
    const deadline = Date.now() + 30_000;
    while (seen.length < expected && Date.now() < deadline) await sleep(50);
    await sleep(500); // anything past `expected` shows up here
  } finally {
    await consumer.disconnect();
  }
  return seen;
}

t.test('an acknowledged record survives the SIGKILL of the broker leading its partition; another leads within seconds', async (t) => {
  await cluster.createTopic('survive', 1);
  const before = Array.from({ length: 100 }, (_, i) => ({ value: `a${i}` }));
  await cluster.produce('survive', before);
  const leader = (await cluster.leaders('survive'))[0];
  const t0 = Date.now();
  await cluster.kill(leader);
  // acks=all with min.insync.replicas=2: the two left take writes once one of them leads
  await cluster.produce('survive', Array.from({ length: 100 }, (_, i) => ({ value: `b${i}` })));
  const failoverMs = Date.now() - t0;
  const next = (await cluster.leaders('survive'))[0];
  t.not(next, leader, `broker ${next} leads now`);
  t.comment(`the first write after the leader's SIGKILL was acknowledged after ${failoverMs} ms`);
  t.ok(failoverMs < 10_000, `failover in ${failoverMs} ms (P12's goal for a Keel node: 10 s)`);
  const seen = await readAll('survive', 200);
  t.same(seen.map((r) => r.value), [...before.map((m) => m.value), ...Array.from({ length: 100 }, (_, i) => `b${i}`)], 'every acknowledged record once, in order');
  await cluster.start(leader);
});

t.test('transactions fence: a second producer with the same transactional.id stops the first; what it had not committed is never read', async (t) => {
  await cluster.createTopic('fenced', 1);
  const producer = (id) => cluster.kafka().producer({ transactionalId: id, idempotent: true, maxInFlightRequests: 1 });
  const first = producer('keel-partition-0');
  await first.connect();
  const old = await first.transaction();
  await old.send({ topic: 'fenced', acks: -1, messages: [{ value: 'old-1' }] });
  // A new leader starts: initProducerId bumps the epoch and aborts the open transaction.
  const second = producer('keel-partition-0');
  await second.connect();
  const fresh = await second.transaction();
  await fresh.send({ topic: 'fenced', acks: -1, messages: [{ value: 'new-1' }] });
  await fresh.commit();
  let refused;
  try {
    await old.send({ topic: 'fenced', acks: -1, messages: [{ value: 'old-2' }] });
    await old.commit();
  } catch (err) {
    refused = err;
  }
  t.ok(refused, `the deposed producer cannot write or commit (${refused?.name}: ${refused?.type ?? refused?.message})`);
  await first.disconnect().catch(() => {});
  await second.disconnect();
  const seen = await readAll('fenced', 1);
  t.same(seen.map((r) => r.value), ['new-1'], 'a read_committed reader sees only the committed write of the new producer');
});

t.test('a Keel subscription on the real cluster: every record once per key order, through the SIGKILL of the broker leading a partition', async (t) => {
  await cluster.createTopic('orders', 3);
  const seen = ledgerAdds;
  const file = path.join(tempDir(t), 'keel.toml');
  fs.writeFileSync(file, `[[ingress.kafka_clusters]]\nname = "real"\nbrokers = [${cluster.brokers.map((b) => JSON.stringify(b)).join(', ')}]\n`);
  const keel = await startKeel(t, { args: ['--config', file] });
  await register(keel, await serveServices(t, [ledger]));
  const r = await admin(keel, 'POST', '/subscriptions', { source: 'kafka://real/orders', sink: 'service://Ledger/add', options: { 'auto.offset.reset': 'earliest', 'session.timeout.ms': '6000', 'heartbeat.interval.ms': '300' } });
  t.equal(r.status, 201, r.text);
  const records = (from, n) => Array.from({ length: n }, (_, j) => ({ key: `k${(from + j) % 5}`, value: JSON.stringify({ i: from + j }) }));
  await cluster.produce('orders', records(0, 60));
  await eventually(() => seen.length >= 60, { timeout_ms: 60_000 });
  const leader = (await cluster.leaders('orders'))[0];
  await cluster.kill(leader);
  await cluster.produce('orders', records(60, 60));
  await eventually(() => seen.length >= 120, { timeout_ms: 60_000 });
  await sleep(1000);
  t.equal(seen.length, 120, 'no record delivered twice');
  for (let k = 0; k < 5; k++) {
    const items = (await fetch(`${keel.ingress}/Ledger/k${k}/get`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }).then((x) => x.json()));
    const expected = Array.from({ length: 120 }, (_, i) => i).filter((i) => i % 5 === k);
    t.same(items, expected, `k${k}: its records once, in offset order`);
  }
  await cluster.start(leader);
});
