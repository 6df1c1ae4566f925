// A real Kafka wire protocol for tests: librdkafka's mock cluster (Debian's librdkafka 2.0.2),
// on ephemeral loopback ports, one per test.
//
// - `startKafkaMock(t)` starts it through `kcat` (Debian package `kcat`); topics are created on
//   first use with 4 partitions.
// - `startKafkaMock(t, { control: true })` starts it through `kmock` (test/helpers/kmock.c,
//   compiled on first use with `cc … -lrdkafka`: Debian packages `gcc` and `librdkafka-dev`),
//   which also takes commands: topics with a chosen partition count, a broker down and up,
//   request errors, an unknown topic.
// `.ci/run` installs the three packages when they are missing.
//
// What the mock does that a broker would not quite: its group coordinator waits ~3 s before
// completing the first join of a new group; a member that left is forgotten only when its session
// expires (use a short session.timeout.ms); each partition keeps about 5 MB, older records trimmed.
import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel, Partitioners } from 'kafkajs';
import { isKafkajsTimerWarning } from '../../dist/common/logger.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * kafkajs's negative timer warning (src/common/logger.ts) is harmless and read like a failure in a
 * test's or the benchmark's output: dropped here; every other warning prints as before.
 */
let kafkajsWarningsDropped = false;
export function dropKafkajsTimerWarnings() {
  if (kafkajsWarningsDropped) return;
  kafkajsWarningsDropped = true;
  const printers = process.listeners('warning');
  process.removeAllListeners('warning');
  process.on('warning', (warning) => {
    if (isKafkajsTimerWarning(warning)) return;
    for (const print of printers) print.call(process, warning);
  });
}

function onPath(cmd) {
  return (process.env.PATH ?? '').split(path.delimiter).some((d) => d && fs.existsSync(path.join(d, cmd)));
}

/** Path of the compiled kmock; compiles it once per source version. */
export function kmockBinary() {
  const source = path.join(root, 'test', 'helpers', 'kmock.c');
  const hash = crypto.createHash('sha256').update(fs.readFileSync(source)).digest('hex').slice(0, 12);
  const dir = path.join(root, 'node_modules', '.cache', 'keel-kmock');
  const bin = path.join(dir, `kmock-${hash}`);
  if (fs.existsSync(bin)) return bin;
  const cc = ['cc', 'gcc'].find(onPath);
  if (!cc || !fs.existsSync('/usr/include/librdkafka/rdkafka_mock.h')) {
    throw new Error('kmock needs a C compiler and librdkafka headers: apt-get install -y gcc librdkafka-dev (as .ci/run does)');
  }
  fs.mkdirSync(dir, { recursive: true });
  const tmp = `${bin}.${process.pid}.tmp`;
  execFileSync(cc, ['-O2', '-o', tmp, source, '-lrdkafka'], { stdio: 'pipe' });
  fs.renameSync(tmp, bin);
  return bin;
}

/**
 * Starts a mock cluster of `brokers` brokers (ids 1..n); `t.teardown` stops it.
 * Returns { bootstrap, brokers, createTopic, down, up, requestErrors, topicError, produce, stop, output() }.
 */
export async function startKafkaMock(t, { brokers = 1, control = false } = {}) {
  let proc;
  if (control) {
    proc = spawn(kmockBinary(), [String(brokers)], { stdio: ['pipe', 'pipe', 'pipe'] });
  } else {
    if (!onPath('kcat')) throw new Error('the Kafka mock needs kcat: apt-get install -y kcat (as .ci/run does)');
    proc = spawn('kcat', ['-P', '-t', 'keel-mock-keepalive', '-b', '127.0.0.1:1', '-X', `test.mock.num.brokers=${brokers}`, '-d', 'mock'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
  }
  let out = '';
  const lines = [];
  const waiters = [];
  let stdoutRest = '';
  proc.stdout.on('data', (d) => {
    out += d;
    stdoutRest += d;
    let i;
    while ((i = stdoutRest.indexOf('\n')) >= 0) {
      const line = stdoutRest.slice(0, i);
      stdoutRest = stdoutRest.slice(i + 1);
      const w = waiters.shift();
      if (w) w(line);
      else lines.push(line);
    }
  });
  proc.stderr.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));

  const bootstrap = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the Kafka mock did not start:\n${out}`)), 10_000);
    const check = () => {
      const m = /BOOTSTRAP (\S+)/.exec(out) ?? /bootstrap\.servers=(\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        proc.stdout.off('data', check);
        proc.stderr.off('data', check);
        resolve(m[1]);
      }
    };
    proc.stdout.on('data', check);
    proc.stderr.on('data', check);
    exited.then((e) => {
      clearTimeout(timer);
      reject(new Error(`the Kafka mock exited (${JSON.stringify(e)}):\n${out}`));
    });
  });
  if (control) lines.shift(); // the BOOTSTRAP line

  async function command(line) {
    if (!control) throw new Error('this mock was started through kcat; start it with { control: true } for commands');
    const answer = lines.length ? Promise.resolve(lines.shift()) : new Promise((resolve) => waiters.push(resolve));
    proc.stdin.write(`${line}\n`);
    const reply = await answer;
    if (reply !== 'ok') throw new Error(`kmock ${line}: ${reply}`);
  }

  let kafka;
  let producer;
  const mock = {
    bootstrap,
    brokers: bootstrap.split(','),
    proc,
    output: () => out,
    /** Creates a topic with `partitions` partitions (before anything auto-creates it). */
    createTopic: (name, partitions) => command(`topic ${name} ${partitions}`),
    /** Closes the broker's connections and refuses new ones, until `up`. */
    down: (id = 1) => command(`down ${id}`),
    up: (id = 1) => command(`up ${id}`),
    /** The next `count` requests of API `apiKey` fail with `errorCode`. */
    requestErrors: (apiKey, errorCode, count = 1) => command(`err ${apiKey} ${errorCode} ${count}`),
    /** Metadata answers `errorCode` for the topic (3: unknown topic or partition; 0 clears). */
    topicError: (name, errorCode) => command(`topicerr ${name} ${errorCode}`),
    /** A kafkajs client on this cluster (logs off). */
    kafka() {
      dropKafkajsTimerWarnings();
      kafka ??= new Kafka({ clientId: 'keel-test', brokers: mock.brokers, logLevel: logLevel.NOTHING, retry: { retries: 8, initialRetryTime: 100 } });
      return kafka;
    },
    /** Produces `messages` ({ key, value, headers, partition }) to `topic`, acknowledged by all replicas. */
    async produce(topic, messages) {
      if (!producer) {
        producer = mock.kafka().producer({ allowAutoTopicCreation: true, createPartitioner: Partitioners.DefaultPartitioner });
        await producer.connect();
      }
      for (let i = 0; i < messages.length; i += 1000) {
        await producer.send({ topic, acks: -1, messages: messages.slice(i, i + 1000) });
      }
    },
    async stop() {
      const p = producer;
      producer = undefined;
      await p?.disconnect().catch(() => {});
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.stdin.end();
      const done = await Promise.race([exited, new Promise((r) => setTimeout(() => r(undefined), 3_000))]);
      if (!done) {
        proc.kill('SIGKILL');
        await exited;
      }
    },
  };
  t.teardown(() => mock.stop());
  return mock;
}
