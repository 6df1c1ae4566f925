// Two Workers of one process on one store, each serving its own partitions (issue 23: partitions on
// several threads), the outbox between them handed over by a BatchAppender — the queue discipline
// cluster nodes use over HTTP (cluster-append.ts), here with an in-process transport.
import t from 'tap';
import { appendBatch, BatchAppender } from '../dist/partition/batch-appender.js';
import { decodeCommand } from '../dist/log/commands.js';
import { EmbeddedLog } from '../dist/log/partition-log.js';
import { InvocationId } from '../dist/common/ids.js';
import { NO_INVOKER, subscriptionRecords, workerStore } from './helpers/worker.mjs';

const HIGH_KEY = (1n << 64n) - 5n; // partition 1 of 2

/** Workers A (partition 0) and B (partition 1) on one store; `posts` counts the batches handed over. */
async function twoWorkers(t) {
  const store = await workerStore(t);
  const { db } = store;
  const workers = [store.worker([0]), store.worker([1])];
  const posts = [];
  for (const [k, w] of workers.entries()) {
    const other = workers[1 - k];
    const destinationOf = (p) => (w.processor(p) === undefined && other.processor(p) !== undefined ? { name: `worker-${1 - k}`, to: other } : undefined);
    w.setRemote(new BatchAppender(destinationOf, (to, entries) => (posts.push(entries.length), appendBatch(to, entries))));
    t.same(await w.open(db), { opened: [k] }, `worker ${k} opens its own partition only`);
    w.start(NO_INVOKER);
  }
  return { db, workers, posts };
}

const eventually = async (f) => {
  const deadline = Date.now() + 10_000;
  while (!f() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return f();
};

t.test("one worker's outbox reaches the other's partition, in order, through a refusal, each entry once", async (t) => {
  const { db, workers, posts } = await twoWorkers(t);
  const [a, b] = workers;
  const [source] = a.processors;
  const [target] = b.processors;
  let refused = 0;
  const refusal = target.refusal.bind(target);
  target.refusal = (kind, fromOutbox) => (refused++ === 0 ? Object.assign(new Error('overloaded (test)'), { code: 'KEEL0501' }) : refusal(kind, fromOutbox));
  await source.append(subscriptionRecords([0, 1], HIGH_KEY));
  await source.append(subscriptionRecords([2, 3], HIGH_KEY));
  const made = () => [...target.state.invocations.values()].filter((s) => s.invoked_by_subscription_id).length;
  t.ok(await eventually(() => made() === 4 && source.state.counters.outbox === 0), 'every record made its invocation on the other worker, and the source dropped its entries');
  t.equal(target.state.dedup.get(0), 4, 'the target applied all four entries of the source');
  t.ok(refused > 1, 'the target refused the first entry it was handed, then took the rest');
  t.ok(posts.reduce((a, b) => a + b, 0) > 4, `what was refused was handed over again (batches of ${posts.join(', ')} entries)`);
  const seqs = [];
  for await (const [, record] of (await EmbeddedLog.open(db, 1)).read(1)) {
    const c = decodeCommand(record);
    if (c.kind === 'invoke') seqs.push(c.source_seq);
  }
  t.same(seqs, [1, 2, 3, 4], "in the target's log in outbox order");
  t.throws(() => a.invocation(InvocationId.random(HIGH_KEY)), { code: 'KEEL0805' }, "a read of the other's partition is refused, not answered empty");
});

t.test('each worker scans the statuses of its own partitions only', async (t) => {
  const { workers } = await twoWorkers(t);
  const [a, b] = workers;
  await a.processors[0].append(subscriptionRecords([0], 7n, { local: true }));
  await b.processors[0].append(subscriptionRecords([0], HIGH_KEY, { local: true }));
  const [low] = [...a.processors[0].state.invocations.keys()];
  const [high] = [...b.processors[0].state.invocations.keys()];
  t.ok(low && high, 'an invocation on each');
  const scanned = async (w) => {
    let text = '';
    for await (const chunk of w.scanInvocationLines()) text += chunk.toString('utf8');
    return text;
  };
  const [sa, sb] = [await scanned(a), await scanned(b)];
  t.ok(sa.includes(low) && !sa.includes(high), "A's scan has partition 0's invocation, not partition 1's");
  t.ok(sb.includes(high) && !sb.includes(low), "B's scan has partition 1's");
});

t.test("a worker's partitions are distinct indexes of the configuration, in order", async (t) => {
  const { worker } = await workerStore(t, { partitions: 4 });
  t.same(worker().allPartitions(), [0, 1, 2, 3], 'every one by default');
  t.same(worker([1, 3]).allPartitions(), [1, 3]);
  for (const bad of [[4], [2, 1], [1, 1], [-1], [0.5]]) t.throws(() => worker(bad), /distinct indexes below 4, in order/, JSON.stringify(bad));
});

t.test('a transport that throws, or answers nonsense, refuses the batch, and the queue goes on', async (t) => {
  let mode = 'throw';
  const sent = [];
  const appender = new BatchAppender(() => ({ name: 'elsewhere', to: 'x' }), (_to, entries) => {
    sent.push(entries.map((e) => e.command.toString()));
    if (mode === 'throw') throw new Error('the port is closed (test)');
    if (mode === 'nonsense') return Promise.resolve({ appended: entries.length + 1 });
    return Promise.resolve({ appended: entries.length });
  });
  const settle = (p) => p.then(() => 'ok', (err) => `${err.code}: ${err.message}`);
  t.equal(await settle(appender.append(0, Buffer.from('a'))), 'KEEL0805: cannot hand commands to elsewhere: the port is closed (test)');
  mode = 'nonsense';
  t.match(await settle(appender.append(0, Buffer.from('b'))), /KEEL0805: cannot hand commands to elsewhere: elsewhere answered 2 of 1 appended/);
  mode = 'ok';
  t.equal(await settle(appender.append(0, Buffer.from('c'))), 'ok', 'the queue was not left stuck');
  t.same(sent, [['a'], ['b'], ['c']], 'the transport got the entries alone, one batch at a time');
});
