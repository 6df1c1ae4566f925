// Which Kafka errors a cluster node treats as passing (src/log/kafkajs.ts), with kafkajs's own
// error classes: a takeover is tried again only on those, and a producer's connect only on an
// error retriable itself — not on kafkajs's "retries run out", which took ~15 s already. The
// producers here are stand-ins that fail their connect as kafkajs's do; the real refusal is in
// kafka-log.test.mjs (a broker's SIGKILL).
import t from 'tap';
import kafkajs from 'kafkajs';
import { atBrokers, connectProducer, isTransientKafkaError, rootCauseMessage } from '../dist/log/kafkajs.js';
import { KeelError } from '../dist/errors/index.js';

const { KafkaJSConnectionError, KafkaJSNumberOfRetriesExceeded, KafkaJSProtocolError, KafkaJSNonRetriableError } = kafkajs;

const refused = () => new KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.1:9');
const runOut = () => new KafkaJSNumberOfRetriesExceeded(refused(), { retryCount: 30, retryTime: 500 });
const fenced = () => new KafkaJSProtocolError({ type: 'INVALID_PRODUCER_EPOCH', code: 47, retriable: false, message: 'fenced' });

t.test('passing Kafka trouble: a retriable error, or one caused by it however wrapped', async (t) => {
  t.ok(isTransientKafkaError(refused()), 'a refused connection');
  t.ok(isTransientKafkaError(new KafkaJSProtocolError({ type: 'NOT_LEADER_OR_FOLLOWER', code: 6, retriable: true, message: 'moved' })), 'a leader that moved');
  t.ok(isTransientKafkaError(runOut()), "kafkajs's retries run out on a refused connection");
  t.ok(isTransientKafkaError(new KeelError('KEEL0801', 'cannot take over', { cause: runOut() })), "and that, wrapped in Keel's error");
  t.notOk(isTransientKafkaError(fenced()), 'not a fence');
  t.notOk(isTransientKafkaError(new KafkaJSNumberOfRetriesExceeded(fenced(), { retryCount: 1, retryTime: 1 })), 'nor retries run out on one');
  t.notOk(isTransientKafkaError(new KafkaJSNonRetriableError('broken')), 'nor an error kafkajs gives up on');
  t.notOk(isTransientKafkaError(new KeelError('KEEL0804', 'no snapshot reaches the log')), "nor one of Keel's own");
  t.notOk(isTransientKafkaError(undefined), 'nor nothing');
  let deep = refused();
  for (let i = 0; i < 10; i++) deep = new Error(`wrap ${i}`, { cause: deep });
  t.notOk(isTransientKafkaError(deep), 'the causes are looked through to a bounded depth');
});

/** Producers whose connects fail with `errors` in turn, then succeed; each counts its disconnects. */
function producers(errors) {
  const made = [];
  const create = () => {
    const err = errors[made.length];
    const p = { disconnects: 0, connect: async () => { if (err) throw err; }, disconnect: async () => void (p.disconnects += 1) };
    made.push(p);
    return p;
  };
  return { made, create };
}

t.test("a producer's connect is tried again with a fresh producer only on an error retriable itself", async (t) => {
  const twice = producers([refused(), refused()]);
  const p = await connectProducer(twice.create, () => false);
  t.equal(twice.made.length, 3, 'refused twice: the third producer connected');
  t.equal(p, twice.made[2], 'and is the one returned');
  t.same(twice.made.map((x) => x.disconnects), [1, 1, 0], 'each refused one disconnected');
  const exhausted = producers([runOut()]);
  await t.rejects(connectProducer(exhausted.create, () => false), { name: 'KafkaJSNumberOfRetriesExceeded' }, "kafkajs's retries run out: given up at once");
  t.equal(exhausted.made.length, 1, 'one producer made');
  const fence = producers([fenced()]);
  await t.rejects(connectProducer(fence.create, () => false), { type: 'INVALID_PRODUCER_EPOCH' });
  t.equal(fence.made.length, 1, 'a fence is not tried again');
  let closed = false;
  const closing = producers([refused(), refused(), refused()]);
  const connecting = connectProducer(() => ((closed = true), closing.create()), () => closed);
  await t.rejects(connecting, /the Kafka client is closed/, 'a client closed while it retries makes no more producers');
  t.equal(closing.made.length, 1, 'after the one refused');
});

t.test("a start step at the brokers: Kafka's failure becomes KEEL0801 naming the step, the brokers and the innermost cause", async (t) => {
  t.equal(rootCauseMessage(runOut()), 'Connection error: connect ECONNREFUSED 127.0.0.1:9', "through kafkajs's retries run out");
  t.equal(rootCauseMessage(new Error('outer', { cause: new Error('') })), 'outer', 'an empty message below is passed over');
  t.equal(rootCauseMessage('a string'), 'a string');
  t.equal(await atBrokers('read', ['b:1'], async () => 7), 7, 'what the step returns, when it works');
  const err = await atBrokers('read the cluster metadata', ['b:1', 'b:2'], () => Promise.reject(runOut())).catch((e) => e);
  t.ok(err instanceof KeelError && err.code === 'KEEL0801' && err.status === 503, 'KEEL0801');
  t.equal(err.message, 'cannot read the cluster metadata on the Kafka brokers b:1, b:2 (cluster.brokers): Connection error: connect ECONNREFUSED 127.0.0.1:9');
  t.ok(err.cause instanceof KafkaJSNumberOfRetriesExceeded, "kafkajs's error kept as the cause");
  const own = new KeelError('META0018', 'another node changed the metadata');
  t.equal(await atBrokers('read', ['b:1'], () => Promise.reject(own)).catch((e) => e), own, "one of Keel's own errors passes as it is");
  const local = Object.assign(new Error("EACCES: permission denied, open '/store/cluster-log.tmp'"), { code: 'EACCES', syscall: 'open' });
  t.equal(await atBrokers('read', ['b:1'], () => Promise.reject(local)).catch((e) => e), local, 'and so does a local one (a file): it is no broker failure');
});
