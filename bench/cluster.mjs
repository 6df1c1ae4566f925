// The cluster cell of `make bench` (`npm run bench:cluster`; BENCH_CLUSTER=0 skips it in `make bench`):
// one Keel node on its embedded log, then three Keel nodes on three Apache Kafka brokers (KRaft, on
// loopback: the tests' helper, test/helpers/kafka-cluster.mjs), the same SDK service. It reports:
//   - closed-loop noop calls at BENCH_CLUSTER_CONCURRENCY (32) for BENCH_DURATION s (6): the single node,
//     then the cluster (its partitions spread over the three nodes) through node a and through node b
//     (a plain service's invocation starts on a partition the node asked leads);
//   - Kafka's append floor: one record produced and acknowledged (acks=all), sequentially;
//   - failover under load: adds to 8 objects (on partitions every node leads) through node b while node a
//     is SIGKILLed — the longest wait for an answer, and the calls answered, failed and whether the
//     counters lost or doubled any.
// Writes bench/results/cluster.json. On 2 cores the brokers, three nodes, the service and the load
// share the machine: the cluster is slower than one node here, and the figures say by how much.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { stopGroup, crashGroup } from './children.mjs';
import { LOG_DIR, RESULTS_DIR, fmt, httpCall, log, median, pickNode, sleep } from './common.mjs';
import { closedLoopCell, SCENARIOS } from './scenarios.mjs';
import { sampleCpu } from './proc.mjs';
import { newServer, probe, register, spawnServer, startService, waitHealthy } from './targets.mjs';
import { startKafkaCluster } from '../test/helpers/kafka-cluster.mjs';
import { dropKafkajsTimerWarnings } from '../test/helpers/kafka.mjs';

const duration = Number(process.env.BENCH_DURATION ?? 6);
const concurrency = Number(process.env.BENCH_CLUSTER_CONCURRENCY ?? 32);
const opts = { runWarmupMs: 1000, durationMs: duration * 1000, requestTimeoutMs: 10_000 };
const node = pickNode();
mkdirSync(LOG_DIR, { recursive: true });
const cleanups = [];
const fakeT = { teardown: (fn) => cleanups.push(fn) };
const result = { date: new Date().toISOString(), concurrency, durationS: duration, cells: {}, kafkaAppendMs: undefined, failover: undefined };
const row = (r) => (r.failed ? `ERROR ${r.failed}` : `${fmt(r.rps, 1)} req/s p50 ${fmt(r.latencyMs.p50, 2)} ms p99 ${fmt(r.latencyMs.p99, 2)} ms ok ${r.ok} errors ${r.errors}`);

async function startNode(name, env) {
  const s = await newServer('keel', { logName: `cluster-${name}` });
  s.env = env;
  spawnServer(s);
  await waitHealthy(s, { timeoutMs: 30_000 });
  cleanups.push(() => stopGroup(s.child, 3000));
  return s;
}

/** Each partition's leader as node `s` sees it. */
const leadersOf = async (s) => (JSON.parse((await httpCall('GET', `${s.admin}/cluster`, { timeoutMs: 2000 })).text || '{}').partitions ?? []).map((p) => p.leader);
/** Whether every partition is led by one of `names`, and each of them leads some, as `s` sees it. */
const spreadOver = async (s, names) => {
  const leaders = await leadersOf(s);
  return leaders.length > 0 && leaders.every((l) => names.includes(l)) && names.every((n) => leaders.includes(n));
};

async function until(what, f, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await f().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(100);
  }
}

/**
 * One closed-loop cell; `others`: processes whose CPU during the cell is reported per invocation
 * beside the server's (the standbys, the brokers).
 */
async function cell(name, server, service, others = {}) {
  const before = sampleCpu(others);
  const r = await closedLoopCell(node, server, service, SCENARIOS.noop, concurrency, opts);
  const after = sampleCpu(others);
  const perInvocation = Object.fromEntries(Object.keys(others).map((k) => [k, r.ok > 0 && after[k] != null ? (after[k] - before[k]) / r.ok : null]));
  result.cells[name] = { ...r, otherCpuMsPerInvocation: perInvocation };
  const extra = Object.entries(perInvocation).map(([k, v]) => `${k} ${fmt(v, 3)}`).join(', ');
  log(`${name.padEnd(22)} ${row(r)} cpu ms/inv: server ${fmt(r.cpuMsPerInvocation?.server, 3)}${extra ? `, ${extra}` : ''}`);
}

/** Sequential single-record appends, acknowledged by all in-sync replicas: the floor under every cluster append. */
async function kafkaFloor(kafka) {
  dropKafkajsTimerWarnings();
  const client = new Kafka({ clientId: 'bench', brokers: kafka.brokers, logLevel: logLevel.NOTHING });
  const admin = client.admin();
  await admin.connect();
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: 'bench-floor', numPartitions: 1, replicationFactor: 3, configEntries: [{ name: 'min.insync.replicas', value: '2' }] }] });
  await admin.disconnect();
  const producer = client.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const times = [];
  for (let i = 0; i < 300; i++) {
    const t0 = performance.now();
    await producer.send({ topic: 'bench-floor', acks: -1, messages: [{ partition: 0, value: 'x' }] });
    if (i >= 50) times.push(performance.now() - t0);
  }
  await producer.disconnect();
  times.sort((a, b) => a - b);
  result.kafkaAppendMs = { p50: median(times), p99: times[Math.floor(times.length * 0.99)] };
  log(`kafka append (acks=all, 1 record): p50 ${fmt(result.kafkaAppendMs.p50, 2)} ms p99 ${fmt(result.kafkaAppendMs.p99, 2)} ms`);
}

/** Counter adds to 8 objects through `via` (idempotency keys, retried until answered) while `victim` is SIGKILLed. */
async function failover(via, victim, survivors) {
  let stop = false;
  const answered = [];
  /** Per object, the times of its answers: the failover is the longest wait of an object whose partition a led. */
  const byKey = Array.from({ length: 8 }, () => []);
  let failed = 0;
  let n = 0;
  const worker = async (w) => {
    while (!stop) {
      const i = n++;
      for (;;) {
        const r = await httpCall('POST', `${via.ingress}/Counter/failover-${w}/add`, { body: { delta: 1 }, headers: { 'idempotency-key': `f-${w}-${i}` }, timeoutMs: 15_000 });
        if (r.status === 200) break;
        failed++;
        if (stop) return;
        await sleep(50);
      }
      const at = performance.now();
      answered.push(at);
      byKey[w].push(at);
    }
  };
  const workers = Array.from({ length: 8 }, (_, w) => worker(w));
  await sleep(2000);
  const killedAt = performance.now();
  await crashGroup(victim.child);
  await until("the others lead the victim's partitions", () => spreadOver(via, survivors), 60_000);
  await until('answers resume', async () => answered.filter((t) => t > killedAt).length >= 20, 60_000);
  stop = true;
  await Promise.all(workers);
  // Per object, the longest wait between two of its answers from the last one before the kill on
  // (answers in flight at the kill may come a moment after it: the first answer after it is not the
  // end of the failover). Objects on partitions the others led answer throughout; the longest wait
  // is that of the objects whose partitions moved.
  const gaps = byKey.map((times) => {
    const points = [times.filter((t) => t <= killedAt).at(-1) ?? killedAt, ...times.filter((t) => t > killedAt)];
    let gap = 0;
    for (let i = 1; i < points.length; i++) gap = Math.max(gap, points[i] - points[i - 1]);
    return Math.round(gap);
  });
  const gap = Math.max(...gaps);
  let count = 0;
  for (let w = 0; w < 8; w++) count += Number((await httpCall('POST', `${via.ingress}/Counter/failover-${w}/get`, { body: {}, timeoutMs: 10_000 })).text);
  result.failover = { gapMs: gap, gapsByObjectMs: gaps, answered: answered.length, retriedFailures: failed, counter: count, lostOrDoubled: count - answered.length };
  log(`failover (SIGKILL of node a, 8 callers through node b): the longest wait of an object ${fmt(gap, 0)} ms (each: ${gaps.join(', ')} ms); ${answered.length} adds answered, counters sum to ${count}`);
}

try {
  const service = await startService(node, 'cluster');
  cleanups.push(() => stopGroup(service.child, 3000));
  const single = await startNode('single', {});
  await register(single, service.url, { timeoutMs: 30_000 });
  await probe(single, SCENARIOS.noop, { timeoutMs: 30_000, requestTimeoutMs: 10_000 });
  await cell('single node', single, service);
  await stopGroup(single.child, 5000);

  const kafka = await startKafkaCluster(fakeT, { brokers: 3 });
  await kafkaFloor(kafka);
  const env = (name) => ({ KEEL_CLUSTER__BROKERS: kafka.brokers.join(','), KEEL_CLUSTER__NODE_NAME: name, KEEL_CLUSTER__SESSION_TIMEOUT: '2s' });
  const a = await startNode('a', env('a'));
  const b = await startNode('b', env('b'));
  const c = await startNode('c', env('c'));
  await until('the partitions spread over a, b and c', () => spreadOver(a, ['a', 'b', 'c']), 60_000);
  await register(a, service.url, { timeoutMs: 30_000 });
  for (const s of [a, b]) await probe(s, SCENARIOS.noop, { timeoutMs: 30_000, requestTimeoutMs: 10_000 });
  // The brokers' JVMs: every pid of the helper's processes (their CPU counts against the cluster).
  const brokers = Object.fromEntries(kafka.nodes.map((n) => [`broker ${n.id}`, n.proc.pid]));
  await cell('cluster, via node a', a, service, { 'node b': b.pid, 'node c': c.pid, ...brokers });
  await cell('cluster, via node b', b, service, { 'node a': a.pid, 'node c': c.pid, ...brokers });
  await failover(b, a, ['b', 'c']);
} finally {
  for (const fn of cleanups.reverse()) await fn();
}
const single = result.cells['single node'];
const viaA = result.cells['cluster, via node a'];
if (single?.rps && viaA?.rps) log(`cluster/single throughput: ${fmt(viaA.rps / single.rps, 2)}`);
writeFileSync(join(RESULTS_DIR, 'cluster.json'), JSON.stringify(result, null, 2));
log(`wrote ${join(RESULTS_DIR, 'cluster.json')}`);
