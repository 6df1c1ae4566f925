// Kafka subscriptions: records per second delivered to a no-op handler, on librdkafka's mock cluster
// (test/helpers/kafka.mjs, through Debian's kcat), the same for every server.
//
// Per target: N records (100-byte JSON values, 100 keys) are produced to a fresh topic of 4 partitions
// before the server starts; then a fresh server with the cluster in its TOML config
// (`[[ingress.kafka-clusters]]` for Restate, `[[ingress.kafka_clusters]]` for Keel), its own SDK service
// process (bench/service.mjs, Bench/kafkaNoop counts what it sees), a subscription
// kafka://bench/<topic> → service://Bench/kafkaNoop with auto.offset.reset=earliest. The handler's first
// and last call time the delivery: records/s = N / (last − first), so the mock's ~3 s group join is left
// out (it is "to first", from the subscription's creation to the first call). lost = N − distinct
// (partition, offset) seen; extra = calls beyond one per record (a retried attempt counts too).
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stopGroup } from './children.mjs';
import { fmt, freePort, httpCall, log, sleep, tail } from './common.mjs';
import { newServer, register, spawnServer, startService, waitHealthy } from './targets.mjs';
import { startKafkaMock } from '../test/helpers/kafka.mjs';

const PARTITIONS = 4;
const VALUE = JSON.stringify({ payload: 'x'.repeat(84) }); // 100 bytes

const onPath = (cmd) => (process.env.PATH ?? '').split(':').some((d) => d && existsSync(join(d, cmd)));

/** The Kafka phase runs when kcat (the mock cluster) is on PATH, unless --kafka 0. */
export const kafkaAvailable = () => onPath('kcat');

/** One mock cluster for the whole run; `close` stops it. */
export async function startMock() {
  const teardowns = [];
  const mock = await startKafkaMock({ teardown: (f) => teardowns.push(f) });
  return { mock, close: async () => Promise.all(teardowns.map((f) => f())) };
}

function clusterConfig(target, brokers) {
  const list = brokers.map((b) => JSON.stringify(b)).join(', ');
  // Restate's key is kebab-case (deprecated in 1.7 in favour of POST /kafka-clusters, still read).
  return target === 'restate' ? `[[ingress.kafka-clusters]]\nname = "bench"\nbrokers = [${list}]\n` : `[[ingress.kafka_clusters]]\nname = "bench"\nbrokers = [${list}]\n`;
}

async function counts(counter) {
  const r = await httpCall('GET', counter, { timeoutMs: 2000 });
  return r.status === 200 ? JSON.parse(r.text) : undefined;
}

/** One target: produce, start, subscribe, wait for every record. */
export async function kafkaCell(target, node, mock, opts) {
  const n = opts.kafkaRecords;
  const topic = `bench-${target}-${Date.now()}`;
  const out = { target, records: n, partitions: PARTITIONS };
  const t0 = Date.now();
  await mock.produce(topic, Array.from({ length: n }, (_, i) => ({ key: `k${i % 100}`, value: VALUE, partition: i % PARTITIONS })));
  out.produceMs = Date.now() - t0;

  const counterPort = await freePort();
  const counter = `http://127.0.0.1:${counterPort}/count`;
  const service = await startService(node, `${target}-kafka`, { env: { BENCH_COUNTER_PORT: String(counterPort) } });
  const s = await newServer(target, { logName: `${target}-kafka` });
  s.configFile = join(s.dataDir, 'bench-kafka.toml');
  writeFileSync(s.configFile, clusterConfig(target, mock.brokers));
  try {
    spawnServer(s);
    await waitHealthy(s, { timeoutMs: opts.startTimeoutMs, intervalMs: 50 });
    await register(s, service.url, { timeoutMs: opts.startTimeoutMs });
    // A new deployment may take a moment to reach Restate's subscription validation: retry briefly.
    let sub;
    for (let i = 0; i < 20 && !(sub?.status >= 200 && sub.status < 300); i++) {
      if (i > 0) await sleep(250);
      sub = await httpCall('POST', `${s.admin}/subscriptions`, {
        body: { source: `kafka://bench/${topic}`, sink: 'service://Bench/kafkaNoop', options: { 'auto.offset.reset': 'earliest' } },
        timeoutMs: 10_000,
      });
    }
    if (!(sub.status >= 200 && sub.status < 300)) throw new Error(`subscription: HTTP ${sub.status} ${sub.text.slice(0, 300)}`);
    const subscribedAt = Date.now();
    const deadline = subscribedAt + opts.kafkaTimeoutMs;
    let c;
    for (;;) {
      c = await counts(counter);
      if (c && c.distinct >= n) break;
      if (s.child.exited) throw new Error('server exited');
      if (Date.now() > deadline) throw new Error(`timed out: ${c?.distinct ?? 0} of ${n} records after ${opts.kafkaTimeoutMs / 1000} s`);
      await sleep(100);
    }
    await sleep(300); // late duplicates, if any, still count
    c = await counts(counter);
    Object.assign(out, {
      toFirstMs: c.first_ms - subscribedAt,
      firstToLastMs: c.last_ms - c.first_ms,
      recordsPerSec: n / Math.max(0.001, (c.last_ms - c.first_ms) / 1000),
      lost: n - c.distinct,
      extra: c.calls - c.distinct,
    });
  } catch (e) {
    out.error = e.message;
    out.logTail = tail(s.logFile);
  } finally {
    await stopGroup(s.child);
    await stopGroup(service.child);
    if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
  }
  out.logFile = s.logFile;
  log(
    out.error
      ? `${target} kafka: ERROR ${out.error}`
      : `${target} kafka: ${n} records, ${fmt(out.recordsPerSec, 0)} records/s (first→last ${fmt(out.firstToLastMs, 0)} ms, to first ${fmt(out.toFirstMs, 0)} ms), lost ${out.lost}, extra ${out.extra}`,
  );
  return out;
}
