// A real Apache Kafka cluster for tests: N brokers (KRaft, each broker and controller at once) on
// loopback, formatted fresh in a temporary directory, with the broker of test/kafka/pom.xml
// (Maven Central, installed by test/kafka/install.sh into ~/.cache/keel-kafka; `.ci/run` runs it).
//
// Settings for tests, not production: short broker sessions and elections (a SIGKILLed broker is
// fenced after ~1.5 s instead of 9 s), groups that rebalance at once, small internal topics, every
// topic replicated to all brokers with min.insync.replicas = N - 1.
//
// `startKafkaCluster(t, { brokers })` returns { bootstrap, brokers, createTopic, leaders, kill,
// start, pause, resume, kafka, produce, stop, output }; `t.teardown` stops every broker.
import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel, Partitioners } from 'kafkajs';
import { tempDir, freePort } from './keel.mjs';
import { dropKafkajsTimerWarnings } from './kafka.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const START_TIMEOUT_MS = 60_000;

let installed;
/** The broker's jars (test/kafka/install.sh, once per machine). */
export function kafkaLibs() {
  installed ??= path.join(execFileSync(path.join(here, '..', 'kafka', 'install.sh'), { encoding: 'utf8' }).trim(), 'libs');
  return installed;
}

/** `n` distinct loopback ports free now (freePort: outside the ephemeral range). */
async function freePorts(n) {
  const ports = new Set();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}

/** Kafka's Uuid as its tools print it: 16 random bytes, base64url without padding. */
function clusterId() {
  // One starting with '-' would be read by the storage tool's argument parser as an option.
  for (;;) {
    const id = crypto.randomBytes(16).toString('base64url');
    if (/^[A-Za-z0-9]/.test(id)) return id;
  }
}

function properties({ id, port, controllerPort, voters, dir, brokers }) {
  const isr = Math.max(1, brokers - 1);
  return [
    'process.roles=broker,controller',
    `node.id=${id}`,
    `controller.quorum.voters=${voters}`,
    `listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controllerPort}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${port}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
    `log.dirs=${path.join(dir, 'data')}`,
    'num.partitions=1',
    `default.replication.factor=${brokers}`,
    `min.insync.replicas=${isr}`,
    `offsets.topic.replication.factor=${brokers}`,
    'offsets.topic.num.partitions=3',
    `transaction.state.log.replication.factor=${brokers}`,
    `transaction.state.log.min.isr=${isr}`,
    'transaction.state.log.num.partitions=3',
    `share.coordinator.state.topic.replication.factor=${brokers}`,
    `share.coordinator.state.topic.min.isr=${isr}`,
    'auto.create.topics.enable=false',
    'group.initial.rebalance.delay.ms=0',
    'group.min.session.timeout.ms=1000',
    'broker.heartbeat.interval.ms=250',
    'broker.session.timeout.ms=1500',
    'controller.quorum.election.timeout.ms=500',
    'controller.quorum.election.backoff.max.ms=500',
    'controller.quorum.fetch.timeout.ms=1000',
    'replica.lag.time.max.ms=3000',
    'num.network.threads=2',
    'num.io.threads=2',
    'log.flush.interval.messages=9223372036854775807',
    '',
  ].join('\n');
}

// Warnings only, but the line that says a broker started (what waitForBroker waits for).
const JVM = [
  '-Xms64m', '-Xmx384m', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1', '-Djava.awt.headless=true',
  '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn', '-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaRaftServer=info',
];

/** Starts `brokers` brokers (ids 1..n; on `ports` where given) and waits until all of them answer metadata. */
export async function startKafkaCluster(t, { brokers: count = 3, ports: brokerPorts } = {}) {
  const libs = kafkaLibs();
  const root = tempDir(t);
  const ports = await freePorts(2 * count);
  const nodes = Array.from({ length: count }, (_, i) => ({ id: i + 1, port: brokerPorts?.[i] ?? ports[2 * i], controllerPort: ports[2 * i + 1], dir: path.join(root, `broker-${i + 1}`), proc: undefined, out: '' }));
  const voters = nodes.map((n) => `${n.id}@127.0.0.1:${n.controllerPort}`).join(',');
  const cid = clusterId();
  const cp = `${libs}/*`;
  for (const n of nodes) {
    fs.mkdirSync(n.dir, { recursive: true });
    n.config = path.join(n.dir, 'server.properties');
    fs.writeFileSync(n.config, properties({ ...n, voters, brokers: count }));
  }
  // Formatting is a JVM start each: in parallel.
  await Promise.all(nodes.map((n) => run('java', [...JVM, '-cp', cp, 'kafka.tools.StorageTool', 'format', '-t', cid, '-c', n.config])));
  const start = (n) => {
    // A restarted broker's output starts afresh: what waitForBroker waits for is this start's line
    // (the last one's made a restart return at once, before the broker listened).
    n.out = '';
    n.proc = spawn('java', [...JVM, `-Dkafka.logs.dir=${n.dir}`, '-cp', cp, 'kafka.Kafka', n.config], { stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (d) => (n.out = (n.out + d).slice(-64 * 1024));
    n.proc.stdout.on('data', keep);
    n.proc.stderr.on('data', keep);
    n.exited = new Promise((resolve) => n.proc.once('exit', resolve));
  };
  nodes.forEach(start);
  const byId = (id) => {
    const n = nodes.find((x) => x.id === id);
    if (!n) throw new Error(`no broker ${id} in this cluster`);
    return n;
  };
  let kafka;
  let producer;
  const cluster = {
    bootstrap: nodes.map((n) => `127.0.0.1:${n.port}`).join(','),
    brokers: nodes.map((n) => `127.0.0.1:${n.port}`),
    nodes,
    output: (id) => byId(id).out,
    /** A kafkajs client on this cluster (logs off). */
    kafka() {
      // Retries at most 500 ms apart: with kafkajs's backoff doubling to seconds, the first write
      // after a leader's SIGKILL was acknowledged ~11 s after it.
      dropKafkajsTimerWarnings();
      kafka ??= new Kafka({ clientId: 'keel-test', brokers: cluster.brokers, logLevel: logLevel.NOTHING, retry: { retries: 40, initialRetryTime: 100, maxRetryTime: 500 } });
      return kafka;
    },
    /** Creates a topic replicated to every broker; waits until each partition has a leader. */
    async createTopic(name, partitions, configEntries = []) {
      const admin = cluster.kafka().admin();
      await admin.connect();
      try {
        await admin.createTopics({ waitForLeaders: true, topics: [{ topic: name, numPartitions: partitions, replicationFactor: count, configEntries }] });
      } finally {
        await admin.disconnect();
      }
    },
    /** The broker id leading each partition of `topic`, by partition. */
    async leaders(topic) {
      const admin = cluster.kafka().admin();
      await admin.connect();
      try {
        const meta = await admin.fetchTopicMetadata({ topics: [topic] });
        return Object.fromEntries(meta.topics[0].partitions.map((p) => [p.partitionId, p.leader]));
      } finally {
        await admin.disconnect();
      }
    },
    /** Produces `messages` to `topic`, acknowledged by all in-sync replicas. */
    async produce(topic, messages) {
      if (!producer) {
        producer = cluster.kafka().producer({ createPartitioner: Partitioners.DefaultPartitioner });
        await producer.connect();
      }
      for (let i = 0; i < messages.length; i += 1000) await producer.send({ topic, acks: -1, messages: messages.slice(i, i + 1000) });
    },
    /** SIGKILLs broker `id` (its data stays: `start` brings it back). */
    async kill(id) {
      const n = byId(id);
      if (n.proc.exitCode === null && n.proc.signalCode === null) n.proc.kill('SIGKILL');
      await n.exited;
    },
    async start(id) {
      const n = byId(id);
      if (n.proc.exitCode === null && n.proc.signalCode === null) throw new Error(`broker ${id} runs already`);
      start(n);
      await waitForBroker(n);
    },
    pause: (id) => byId(id).proc.kill('SIGSTOP'),
    resume: (id) => byId(id).proc.kill('SIGCONT'),
    async stop() {
      const p = producer;
      producer = undefined;
      await p?.disconnect().catch(() => {});
      await Promise.all(nodes.map(async (n) => {
        if (n.proc.exitCode !== null || n.proc.signalCode !== null) return;
        n.proc.kill('SIGCONT');
        n.proc.kill('SIGKILL');
        await n.exited;
      }));
    },
  };
  t.teardown(() => cluster.stop());
  try {
    await Promise.all(nodes.map(waitForBroker));
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}

/** Resolves once the broker logs that it started; rejects with its output when it exits first. */
async function waitForBroker(n) {
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (/Kafka Server started/.test(n.out)) return;
    if (n.proc.exitCode !== null || n.proc.signalCode !== null) throw new Error(`broker ${n.id} exited (${n.proc.exitCode ?? n.proc.signalCode}):\n${n.out.slice(-4000)}`);
    if (Date.now() > deadline) throw new Error(`broker ${n.id} did not start in ${START_TIMEOUT_MS} ms:\n${n.out.slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function run(cmd, args) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.once('error', reject);
    p.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.slice(-4).join(' ')} exited ${code}:\n${out.slice(-4000)}`))));
  });
}
