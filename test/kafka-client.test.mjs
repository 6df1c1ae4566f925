// Keel's Kafka client interface (src/subscriptions) against a real Kafka wire protocol:
// librdkafka's mock cluster (test/helpers/kafka.mjs). Order per partition, record fields, pause
// and resume, seek, positions handed back by Keel winning over the group's commits, commits and
// lag, a rebalance between two members, a broker down and back, a broker unreachable at start,
// an unknown topic that appears later; the librdkafka-style options, refused with META0009 by a real Keel's POST /subscriptions.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import { startKafkaMock } from './helpers/kafka.mjs';
import { startKeel, serveServices, register, tempDir, adminCall as admin, freePort } from './helpers/keel.mjs';
import { createKafkaConsumer } from '../dist/subscriptions/index.js';
import { kafkaConsumerSettings } from '../dist/metadata/kafka-options.js';

/** The mock forgets a member that left only when its session expires: keep sessions short. */
const QUICK = { 'session.timeout.ms': '6000', 'heartbeat.interval.ms': '300', 'max.poll.interval.ms': '8000' };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, f, timeout_ms = 20_000) {
  const deadline = Date.now() + timeout_ms;
  for (;;) {
    if (await f()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/**
 * A consumer wired the way Keel will wire it: positions kept in `store` (Keel's log, shared by
 * members of one test) and handed back on assignment; every delivery recorded.
 */
function consumer(t, { bootstrap, topic, options = {}, store = new Map(), name = 'c' }) {
  const settings = kafkaConsumerSettings({ name: 'test', properties: { 'bootstrap.servers': bootstrap } }, options, 'sub_1test');
  const me = { name, deliveries: [], warnings: [], assignedEvents: [], revokedEvents: [], store, answer: undefined, failNext: 0, refused: [] };
  me.client = createKafkaConsumer(settings, topic, {
    onAssigned(partitions) {
      me.assignedEvents.push(partitions);
      if (me.answer) return me.answer(partitions);
      const m = new Map();
      for (const p of partitions) if (store.has(p)) m.set(p, store.get(p));
      return m;
    },
    onRevoked(partitions) {
      me.revokedEvents.push(partitions);
    },
    async onRecords(records) {
      if (me.failNext > 0) {
        me.failNext--;
        me.refused.push(records.map((r) => `${r.partition}:${r.offset}`));
        throw new Error('the log is busy');
      }
      for (const r of records) {
        me.deliveries.push(r);
        store.set(r.partition, r.offset + 1);
      }
    },
    onWarning(message) {
      me.warnings.push(message);
    },
  });
  me.of = (p) => me.deliveries.filter((r) => r.partition === p);
  me.client.start();
  t.teardown(() => me.client.stop());
  return me;
}

/**
 * Across every list of deliveries (one per member): each (partition, offset) at most once; within
 * one member's list, offsets ascend per partition.
 */
function checkOncePerOffset(t, lists, label) {
  const seen = new Set();
  let dup = 0;
  let disorder = 0;
  for (const deliveries of lists) {
    const last = new Map();
    for (const r of deliveries) {
      const id = `${r.partition}:${r.offset}`;
      if (seen.has(id)) dup++;
      seen.add(id);
      if ((last.get(r.partition) ?? -1) >= r.offset) disorder++;
      last.set(r.partition, r.offset);
    }
  }
  t.equal(dup, 0, `${label}: no record delivered twice`);
  t.equal(disorder, 0, `${label}: offsets ascend within each partition`);
}

t.test('kafkajs: order per partition, record fields, pause/resume, seek, commits and lag, positions from Keel', async (t) => {
  const mock = await startKafkaMock(t); // through kcat: the topic is auto-created with 4 partitions
  const started = Date.now();
  const N = 300;
  // Explicit partitions (i % 4), so every partition has records; keys and headers travel as given.
  const msg = (i) => ({ key: `k${i % 10}`, value: `v${i}`, partition: i % 4, headers: { seq: String(i), multi: ['a', 'b'] } });
  await mock.produce('orders', Array.from({ length: N }, (_, i) => msg(i)));
  const c = consumer(t, { bootstrap: mock.bootstrap, topic: 'orders', options: { ...QUICK, 'auto.offset.reset': 'earliest', 'group.id': 'g1' } });
  await until('300 records', () => c.deliveries.length >= N);
  t.same(c.client.assignment(), [0, 1, 2, 3], 'one member: every partition');
  t.same(c.assignedEvents, [[0, 1, 2, 3]]);
  t.equal(c.deliveries.length, N, 'each record once');
  for (let p = 0; p < 4; p++) {
    const rs = c.of(p);
    t.same(rs.map((r) => r.offset), Array.from({ length: N / 4 }, (_, i) => i), `partition ${p}: offsets 0..${N / 4 - 1} in order`);
    t.same(rs.map((r) => r.value.toString()), Array.from({ length: N / 4 }, (_, i) => `v${4 * i + p}`), `partition ${p}: values in production order`);
  }
  const r5 = c.of(1)[1]; // record 5
  t.equal(r5.topic, 'orders');
  t.equal(r5.key.toString(), 'k5');
  t.same(r5.headers.map(([k, v]) => [k, v.toString()]), [['seq', '5'], ['multi', 'a'], ['multi', 'b']], 'headers in order, repeated names kept');
  t.ok(r5.timestamp >= started - 1000 && r5.timestamp <= Date.now(), 'timestamp in ms');

  // pause one partition: the others go on, it gets nothing until resumed, then all of its own in order.
  c.client.pause([0]);
  t.same(c.client.paused(), [0]);
  const before = c.deliveries.length;
  await mock.produce('orders', Array.from({ length: 40 }, (_, i) => msg(N + i)));
  await until('the records of unpaused partitions', () => c.deliveries.length - before >= 30);
  await sleep(1500);
  t.equal(c.deliveries.slice(before).filter((r) => r.partition === 0).length, 0, 'nothing from the paused partition');
  t.equal(c.deliveries.length - before, 30, 'the others were not held back');
  c.client.resume([0]);
  t.same(c.client.paused(), []);
  await until('the paused partition after resume', () => c.deliveries.length - before >= 40);
  t.same(c.of(0).map((r) => r.offset), Array.from({ length: 85 }, (_, i) => i), 'partition 0 went on where it paused');
  checkOncePerOffset(t, [c.deliveries], 'after pause/resume');

  // seek: the next record of that partition is the one at the offset sought, then on in order.
  const mark = c.deliveries.length;
  c.client.seek(1, 5);
  await until('records again from offset 5', () => c.deliveries.length - mark >= 80);
  t.same(c.deliveries.slice(mark).map((r) => [r.partition, r.offset]), Array.from({ length: 80 }, (_, i) => [1, 5 + i]), 'redelivered from 5, in order');

  // lag: nothing left; high watermarks are the partitions' sizes.
  const lag = await c.client.lag();
  t.same(lag.map((l) => l.partition), [0, 1, 2, 3]);
  t.same(lag.map((l) => [l.highWatermark, l.position, l.lag]), [[85, 85, 0], [85, 85, 0], [85, 85, 0], [85, 85, 0]], 'high watermarks, positions, no lag');

  // commits are visible in the group, and only that: positions handed back by Keel win.
  await c.client.commit(new Map([[0, 7], [1, 8], [2, 9], [3, 10]]));
  const admin1 = mock.kafka().admin();
  await admin1.connect();
  const committed = await admin1.fetchOffsets({ groupId: 'g1', topics: ['orders'] });
  await admin1.disconnect();
  t.same(committed[0].partitions.map((x) => [x.partition, x.offset]).sort(), [[0, '7'], [1, '8'], [2, '9'], [3, '10']]);
  await c.client.stop();
  t.same(c.revokedEvents, [[0, 1, 2, 3]], 'stop revokes everything');
  t.same(c.client.assignment(), []);

  const positions = new Map([[0, 3], [1, 4], [2, 5], [3, 6]]);
  const again = consumer(t, { bootstrap: mock.bootstrap, topic: 'orders', options: { ...QUICK, 'group.id': 'g1' }, store: new Map(positions) });
  // A new group and auto.offset.reset=latest (the default): only records produced after it joined.
  const fresh = consumer(t, { bootstrap: mock.bootstrap, topic: 'orders', options: { ...QUICK, 'group.id': 'g2' } });
  await until('both assigned', () => again.client.assignment().length === 4 && fresh.client.assignment().length === 4);
  await until('the new member to deliver', () => again.deliveries.length >= 4 * 85 - 18);
  for (const [p, at] of positions) t.equal(again.of(p)[0].offset, at, `partition ${p} starts where Keel says (${at}), not at the committed ${7 + p}`);
  await sleep(500);
  t.equal(fresh.deliveries.length, 0, 'latest: nothing old');
  await mock.produce('orders', [{ key: 'k3', value: 'late', partition: 2 }]);
  await until('the late record', () => fresh.deliveries.length === 1);
  t.equal(fresh.deliveries[0].value.toString(), 'late');
  t.same(again.warnings.concat(fresh.warnings, c.warnings), [], 'no warnings on the happy path');
});

t.test('kafkajs: a rebalance between two members splits the partitions; positions carry over, no record twice', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.createTopic('rb', 4);
  const all = (i) => ({ key: `k${i}`, value: `v${i}`, partition: i % 4 });
  await mock.produce('rb', Array.from({ length: 200 }, (_, i) => all(i)));
  const store = new Map();
  const options = { ...QUICK, 'auto.offset.reset': 'earliest', 'group.id': 'grb' };
  const a = consumer(t, { bootstrap: mock.bootstrap, topic: 'rb', options, store, name: 'a' });
  await until('a: 200 records', () => a.deliveries.length >= 200);
  t.same(a.client.assignment(), [0, 1, 2, 3]);

  const b = consumer(t, { bootstrap: mock.bootstrap, topic: 'rb', options, store, name: 'b' });
  // b answers its positions asynchronously, as Keel would after reading them.
  b.answer = async (partitions) => {
    await sleep(300);
    return new Map(partitions.filter((p) => store.has(p)).map((p) => [p, store.get(p)]));
  };
  // The mock takes a session timeout or two to settle a rebalance on a busy machine.
  await until('the partitions split between a and b', () => {
    const x = a.client.assignment();
    const y = b.client.assignment();
    return x.length > 0 && y.length > 0 && [...x, ...y].sort().join() === '0,1,2,3';
  }, 45_000);
  const ofB = b.client.assignment();
  t.same(a.client.assignment().filter((p) => ofB.includes(p)), [], 'disjoint');
  // A loaded machine may take more than one rebalance to settle: what counts is that every
  // partition b ended up with was revoked from a, and b was assigned each of them.
  const revoked = new Set(a.revokedEvents.flat());
  t.same(ofB.filter((p) => !revoked.has(p)), [], "a was told it lost b's partitions");
  const assigned = new Set(b.assignedEvents.flat());
  t.same(ofB.filter((p) => !assigned.has(p)), [], 'b was told it got them');

  await mock.produce('rb', Array.from({ length: 200 }, (_, i) => all(200 + i)));
  await until('400 records in all', () => a.deliveries.length + b.deliveries.length >= 400);
  await sleep(500);
  t.equal(a.deliveries.length + b.deliveries.length, 400, 'each once');
  t.ok(b.deliveries.every((r) => ofB.includes(r.partition) && r.offset >= 50), 'b only got its partitions, from where a was');
  checkOncePerOffset(t, [a.deliveries, b.deliveries], 'two members');

  await b.client.stop();
  await until('a has every partition again', () => a.client.assignment().length === 4);
  await mock.produce('rb', Array.from({ length: 40 }, (_, i) => all(400 + i)));
  await until('440 records in all', () => a.deliveries.length + b.deliveries.length >= 440);
  await sleep(500);
  checkOncePerOffset(t, [a.deliveries, b.deliveries], 'after b left');
  for (let p = 0; p < 4; p++) t.equal(store.get(p), 110, `partition ${p}: every record delivered`);
});

t.test('kafkajs: broker down and back, and unreachable at start: warnings, retries, recovery, nothing lost or doubled', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.createTopic('bd', 2);
  await mock.produce('bd', Array.from({ length: 50 }, (_, i) => ({ value: `v${i}`, partition: i % 2 })));
  const options = { ...QUICK, 'auto.offset.reset': 'earliest', 'reconnect.backoff.max.ms': '1000', 'socket.timeout.ms': '3000' };
  const c = consumer(t, { bootstrap: mock.bootstrap, topic: 'bd', options });
  await until('50 records', () => c.deliveries.length >= 50);

  await mock.down(1);
  await sleep(4000);
  t.ok(c.warnings.length > 0, `warned while the broker was down: ${JSON.stringify(c.warnings.slice(0, 3))}`);
  await mock.up(1);
  await mock.produce('bd', Array.from({ length: 50 }, (_, i) => ({ value: `v${50 + i}`, partition: i % 2 })));
  await until('all 100 after the broker came back', () => c.store.get(0) === 50 && c.store.get(1) === 50, 40_000);
  checkOncePerOffset(t, [c.deliveries], 'across the outage');
  t.equal(c.deliveries.length, 100);

  // Nothing listens there: the consumer warns and retries until stopped, and never throws.
  const port = await freePort();
  const lost = consumer(t, { bootstrap: `127.0.0.1:${port}`, topic: 'bd', options: { ...QUICK, 'reconnect.backoff.max.ms': '500' } });
  await until('a warning about the unreachable broker', () => lost.warnings.some((w) => /ECONNREFUSED|Connection/.test(w)), 15_000);
  await until('a restart', () => lost.warnings.some((w) => /restarting the Kafka consumer of topic 'bd'/.test(w)), 15_000);
  await lost.client.stop();
  t.equal(lost.deliveries.length, 0);
});

t.test('kafkajs: an unknown topic is warned about and retried; consumption starts once it exists', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.topicError('ghost', 3); // UNKNOWN_TOPIC_OR_PARTITION in metadata
  const c = consumer(t, { bootstrap: mock.bootstrap, topic: 'ghost', options: { ...QUICK, 'auto.offset.reset': 'earliest', 'reconnect.backoff.max.ms': '1000' } });
  await until('a warning naming the topic', () => c.warnings.some((w) => /'ghost'/.test(w) && /does not host this topic-partition/.test(w)));
  t.same(c.client.assignment(), []);
  await mock.topicError('ghost', 0);
  await mock.produce('ghost', Array.from({ length: 5 }, (_, i) => ({ value: `g${i}`, partition: 0 })));
  await until('the records once the topic exists', () => c.deliveries.length >= 5, 30_000);
  t.same(c.of(0).map((r) => r.value.toString()), ['g0', 'g1', 'g2', 'g3', 'g4']);

  // Keel refuses a batch twice (its log is busy): the same records come again, then on in order.
  c.failNext = 2;
  await mock.produce('ghost', Array.from({ length: 3 }, (_, i) => ({ value: `g${5 + i}`, partition: 0 })));
  await until('the refused records, delivered again', () => c.deliveries.length >= 8, 15_000);
  t.equal(c.refused.length, 2, 'refused twice');
  t.same(c.refused[1], c.refused[0], 'the same records offered again');
  t.equal(c.refused[0][0], '0:5');
  t.same(c.of(0).map((r) => r.value.toString()), ['g0', 'g1', 'g2', 'g3', 'g4', 'g5', 'g6', 'g7'], 'then delivered once, in order');
  t.match(c.warnings.join('\n'), /records were not taken; delivering them again/);
});

t.test('options: librdkafka names mapped, defaults as Restate, what cannot be honoured refused with META0009', async (t) => {
  const cluster = { name: 'kc', properties: { 'bootstrap.servers': '127.0.0.1:9092,broker2:9093', 'client.id': 'from-cluster' } };
  const d = kafkaConsumerSettings(cluster, {}, 'sub_1abc');
  t.match(d, {
    brokers: ['127.0.0.1:9092', 'broker2:9093'],
    groupId: 'sub_1abc',
    clientId: 'from-cluster',
    autoOffsetReset: 'latest',
    sessionTimeoutMs: 45_000,
    heartbeatIntervalMs: 3_000,
    rebalanceTimeoutMs: 300_000,
    readCommitted: true,
    allowAutoTopicCreation: false,
    commitIntervalMs: 5_000,
    ignored: [],
  });
  t.equal(kafkaConsumerSettings({ name: 'kc', properties: { 'bootstrap.servers': 'h:1' } }, {}, 'sub_1abc').clientId, 'restate', "client.id defaults to Restate's");
  const o = kafkaConsumerSettings(
    { name: 'kc', properties: { 'bootstrap.servers': 'h:1', 'group.id': 'cluster-group' } },
    { 'auto.offset.reset': 'smallest', 'session.timeout.ms': '10000', 'heartbeat.interval.ms': '1000', 'enable.auto.commit': 'false', 'isolation.level': 'read_uncommitted', 'security.protocol': 'SASL_SSL', 'sasl.mechanisms': 'SCRAM-SHA-512', 'sasl.username': 'u', 'sasl.password': 'p', 'enable.ssl.certificate.verification': 'false' },
    'sub_1abc',
  );
  t.match(o, { groupId: 'cluster-group', autoOffsetReset: 'earliest', sessionTimeoutMs: 10_000, heartbeatIntervalMs: 1_000, readCommitted: false, ignored: ['enable.auto.commit'], sasl: { mechanism: 'scram-sha-512', username: 'u', password: 'p' }, tls: { rejectUnauthorized: false, checkServerIdentity: true } });
  t.equal(kafkaConsumerSettings(cluster, { 'group.id': 'mine' }, 'sub_1abc').groupId, 'mine', 'the subscription wins over the cluster');

  const refused = [
    [{ 'auto.offset.reset': 'error' }, /'auto\.offset\.reset' = 'error' \(from the subscription's options\) cannot be honoured/],
    [{ 'group.instance.id': 'static-1' }, /'group\.instance\.id'.*not supported/],
    [{ 'session.timeout.ms': 'soon' }, /'session\.timeout\.ms'.*integer/],
    [{ 'heartbeat.interval.ms': '60000' }, /'heartbeat\.interval\.ms'.*lower than session\.timeout\.ms/],
    [{ 'partition.assignment.strategy': 'cooperative-sticky' }, /'partition\.assignment\.strategy'.*round-robin/],
    [{ 'security.protocol': 'sasl_plaintext' }, /'sasl\.mechanism'.*GSSAPI \(librdkafka's default\)/],
    [{ 'security.protocol': 'ssl', 'ssl.ca.location': '/nonexistent/ca.pem' }, /'ssl\.ca\.location'.*cannot read/],
    [{ 'sasl.username': 'u' }, /'sasl\.username'.*no effect with security\.protocol 'plaintext'/],
    [{ 'bootstrap.servers': 'nohostport' }, /'bootstrap\.servers'.*host:port/],
    [{ 'acks': 'all' }, /'acks'.*producer-only/],
  ];
  for (const [options, why] of refused) {
    try {
      kafkaConsumerSettings(cluster, options, 'sub_1abc');
      t.fail(`accepted ${JSON.stringify(options)}`);
    } catch (err) {
      t.equal(err.code, 'META0009', JSON.stringify(options));
      t.equal(err.status, 400);
      t.match(err.message, why);
    }
  }
  try {
    kafkaConsumerSettings({ name: 'kc', properties: { 'bootstrap.servers': 'h:1', 'queued.min.messages': '5' } }, {}, 'sub_1abc');
    t.fail('accepted a cluster property it cannot honour');
  } catch (err) {
    t.match(err.message, /'queued\.min\.messages' = '5' \(from the properties of Kafka cluster 'kc'\)/);
  }
});

t.test('a real Keel refuses such options at POST /subscriptions with META0009 naming the option', async (t) => {
  const file = path.join(tempDir(t), 'keel.toml');
  fs.writeFileSync(
    file,
    `[[ingress.kafka_clusters]]\nname = "kc"\nbrokers = ["127.0.0.1:9092"]\n\n[[ingress.kafka_clusters]]\nname = "odd"\nbrokers = ["127.0.0.1:9092"]\n"queued.min.messages" = "5"\n`,
  );
  const keel = await startKeel(t, { args: ['--config', file] });
  await register(keel, await serveServices(t, [restate.service({ name: 'Orders', handlers: { process: async (_ctx, x) => x } })]));
  const sub = (options, source = 'kafka://kc/orders') => admin(keel, 'POST', '/subscriptions', { source, sink: 'service://Orders/process', options });
  for (const [options, why] of [
    [{ 'auto.offset.reset': 'error' }, /auto\.offset\.reset/],
    [{ 'group.instance.id': 'x' }, /group\.instance\.id/],
    [{ 'heartbeat.interval.ms': '50000' }, /heartbeat\.interval\.ms/],
    [{ 'security.protocol': 'sasl_ssl', 'sasl.mechanism': 'OAUTHBEARER' }, /sasl\.mechanism.*OAUTHBEARER/],
  ]) {
    const r = await sub(options);
    t.equal(r.status, 400, r.text);
    t.equal(r.json?.restate_code, 'META0009');
    t.match(r.json?.message, why);
  }
  const odd = await sub({}, 'kafka://odd/orders');
  t.equal(odd.json?.restate_code, 'META0009');
  t.match(odd.json?.message, /queued\.min\.messages.*Kafka cluster 'odd'/);
  t.same((await admin(keel, 'GET', '/subscriptions')).json, { subscriptions: [] }, 'nothing stored');
  const ok = await sub({ 'auto.offset.reset': 'earliest', 'group.id': 'orders-group', 'session.timeout.ms': '10000', 'enable.auto.commit': 'false' });
  t.equal(ok.status, 201, ok.text);
});
