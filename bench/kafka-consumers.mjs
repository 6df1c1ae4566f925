// Records per second through a plain consumer loop, on librdkafka's mock cluster (loopback):
// kafkajs on its own, and kafkajs behind Keel's interface.
//
//   node bench/kafka-consumers.mjs [records=100000] [partitions=4] [value_bytes=100]
//
// The mock keeps about 5 MB per partition and trims older records beyond that: keep
// records / partitions × (value + ~70 bytes) under it, or the loops never see them all.
// Not part of `make bench`. Needs the mock (test/helpers/kafka.mjs: kcat, gcc, librdkafka-dev).
// The clock runs from the first record delivered to the last, so the mock's ~3 s group-join
// delay is left out; "to first" is printed beside it.
import kafkajs from 'kafkajs';
import { startKafkaMock } from '../test/helpers/kafka.mjs';
import { createKafkaConsumer } from '../dist/subscriptions/index.js';
import { kafkaConsumerSettings } from '../dist/metadata/kafka-options.js';

const [N = 100_000, P = 4, SIZE = 100] = process.argv.slice(2).map(Number);
const teardowns = [];
const t = { teardown: (f) => teardowns.push(f) };

const mock = await startKafkaMock(t, { control: true });
await mock.createTopic('bench', P);
const value = Buffer.alloc(SIZE, 'x');
const produced = Date.now();
await mock.produce('bench', Array.from({ length: N }, (_, i) => ({ key: `k${i % 100}`, value, partition: i % P })));
console.log(`produced ${N} records of ${SIZE} bytes over ${P} partitions in ${Date.now() - produced} ms`);

function report(name, start, first, last, count) {
  const secs = (last - first) / 1000;
  console.log(`${name.padEnd(28)} ${count} records, to first ${first - start} ms, first→last ${(secs * 1000).toFixed(0)} ms: ${Math.round(count / secs)} records/s`);
}

async function raw(group) {
  const { Kafka, logLevel } = kafkajs;
  const consumer = new Kafka({ clientId: 'bench', brokers: mock.brokers, logLevel: logLevel.NOTHING }).consumer({ groupId: group });
  const start = Date.now();
  let first = 0;
  let count = 0;
  let resolveDone;
  const done = new Promise((r) => (resolveDone = r));
  await consumer.connect();
  await consumer.subscribe({ topics: ['bench'], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    partitionsConsumedConcurrently: 8,
    eachBatch: async ({ batch, resolveOffset }) => {
      first ||= Date.now();
      count += batch.messages.length;
      resolveOffset(batch.lastOffset());
      if (count >= N) resolveDone(Date.now());
    },
  });
  const last = await done;
  report('kafkajs eachBatch (raw)', start, first, last, count);
  await consumer.disconnect();
}

async function keel(group) {
  const settings = kafkaConsumerSettings({ name: 'bench', properties: { 'bootstrap.servers': mock.bootstrap } }, { 'auto.offset.reset': 'earliest', 'group.id': group }, 'sub_1bench');
  const start = Date.now();
  let first = 0;
  let count = 0;
  const warnings = [];
  let resolveDone;
  const done = new Promise((r) => (resolveDone = r));
  const c = createKafkaConsumer(settings, 'bench', {
    onAssigned: () => new Map(),
    onRevoked: () => {},
    onRecords: async (records) => {
      first ||= Date.now();
      count += records.length;
      if (count >= N) resolveDone(Date.now());
    },
    onWarning: (m) => warnings.push(m),
  });
  c.start();
  const last = await Promise.race([done, new Promise((r) => setTimeout(() => r(undefined), 30_000))]);
  await c.stop();
  if (last === undefined) console.log(`${`Keel interface, ${c.library}`.padEnd(28)} no records in 30 s; first warning: ${warnings[0]}`);
  else report(`Keel interface, ${c.library}`, start, first, last, count);
}

for (const round of [1, 2, 3]) {
  await raw(`raw-${round}`);
  await keel(`keel-${round}`);
}
for (const f of teardowns) await f();
