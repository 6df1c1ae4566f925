// Crash recovery of a real Keel process: SIGKILL during a durable sleep, registrations that
// survive a restart, and the rebuild check (state folded again from the log equals the store).
import t from 'tap';
import path from 'node:path';
import { startKeel, serveServices, register, ingress, eventually, query } from './helpers/keel.mjs';
import { countingGreeter, failingServices, workService } from './services/core-services.mjs';
import { openWorkerStore } from '../dist/storage/store.js';
import { verifyPartition } from '../dist/partition/verify.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

t.test('SIGKILL during the sleep: completes after restart, Notification once, sleep not restarted', async (t) => {
  const SLEEP_MS = 3000;
  const keel = await startKeel(t);
  const g = countingGreeter({ name: 'Greeter', sleep_ms: SLEEP_MS });
  await register(keel, await serveServices(t, [g.service]));
  const sent = await ingress(keel, '/Greeter/greet/send', { name: 'Crash' });
  t.equal(sent.status, 202);
  await eventually(() => g.count('Notification', 'Crash') === 1);
  const notification = g.events.find((e) => e.step === 'Notification');
  // Well inside the sleep: the attempt has suspended or is waiting on the timer.
  await sleep(1200);
  t.equal(g.count('Reminder'), 0, 'still sleeping when killed');
  const killedAt = Date.now();
  const old = keel.proc;
  await keel.restart();
  t.equal(old.signalCode, 'SIGKILL');
  const readyAt = Date.now();
  t.ok(readyAt - killedAt < SLEEP_MS, 'restarted before the original wake-up (otherwise the test proves little)');
  await eventually(() => g.count('Reminder', 'Crash') === 1, { timeout_ms: 20_000 });
  const reminder = g.events.find((e) => e.step === 'Reminder');
  t.equal(g.count('Notification', 'Crash'), 1, 'Notification ran exactly once');
  t.equal(reminder.uuid, notification.uuid, 'the random uuid is the same after the restart');
  t.ok(reminder.at >= notification.at + SLEEP_MS, `no earlier than the wake-up (${reminder.at - notification.at} ms after Notification)`);
  t.ok(
    reminder.at < readyAt + SLEEP_MS - 500,
    `the sleep lasted only its remaining time (${reminder.at - readyAt} ms after the restart, full sleep is ${SLEEP_MS} ms)`,
  );
  await sleep(300);
  t.equal(g.count('Reminder', 'Crash'), 1, 'Reminder ran once');
});

t.test('SIGKILL while a call waits: the call is lost, the invocation is not', async (t) => {
  const keel = await startKeel(t);
  const g = countingGreeter({ name: 'Greeter', sleep_ms: 1500 });
  await register(keel, await serveServices(t, [g.service]));
  const pending = ingress(keel, '/Greeter/greet', { name: 'Waiting' }).catch((err) => err);
  await eventually(() => g.count('Notification', 'Waiting') === 1);
  // ctx.run is at-least-once until its result is durable: kill only once it is journalled.
  await eventually(async () => (await query(keel, "SELECT count(*) AS n FROM sys_journal WHERE entry_type = 'Notification: Run'"))[0].n >= 1);
  await keel.restart();
  t.type(await pending, Error, 'the client connection died with the server');
  await eventually(() => g.count('Reminder', 'Waiting') === 1);
  t.equal(g.count('Notification', 'Waiting'), 1);
});

t.test('registrations survive SIGKILL and restart', async (t) => {
  const keel = await startKeel(t);
  const g = countingGreeter({ name: 'Greeter', sleep_ms: 10 });
  const f = failingServices();
  const dep = await register(keel, await serveServices(t, [g.service, f.service]));
  t.same((await ingress(keel, '/Greeter/greet', { name: 'before' })).body, { result: 'You said hi to before!' });
  await keel.restart();
  const deployments = await (await fetch(`${keel.admin}/deployments`)).json();
  t.same(deployments.deployments.map((d) => d.id), [dep.id], 'the same deployment, nothing registered again');
  const r = await ingress(keel, '/Greeter/greet', { name: 'after' });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body, { result: 'You said hi to after!' });
  t.same((await ingress(keel, '/Flaky/echo', { id: 'e' })).body, { echo: 'e' });
});

t.test('rebuild check: every partition folded again from its log equals the stored state', async (t) => {
  const PARTITIONS = 4;
  const keel = await startKeel(t, {
    env: { KEEL_WORKER__PARTITIONS: String(PARTITIONS), KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '20ms' },
  });
  const g = countingGreeter({ name: 'Greeter', sleep_ms: 100 });
  const f = failingServices();
  const w = workService({ sleep_ms: 20 });
  await register(keel, await serveServices(t, [g.service, f.service, w.service]));
  const calls = [];
  for (let i = 0; i < 8; i++) calls.push(ingress(keel, '/Greeter/greet', { name: `g${i}` }));
  for (let i = 0; i < 4; i++) calls.push(ingress(keel, '/Flaky/twiceThenOk', { id: `f${i}` }));
  for (let i = 0; i < 40; i++) calls.push(ingress(keel, '/Work/doIt', { id: `w${i}`, n: i }));
  calls.push(ingress(keel, '/Flaky/terminal', { id: 'term' }));
  const results = await Promise.all(calls);
  t.equal(results.filter((r) => r.status === 200).length, calls.length - 1);
  // One invocation left in flight (sleeping) when the server stops.
  await ingress(keel, '/Greeter/greet/send', { name: 'inflight' });
  await eventually(() => g.count('Notification', 'inflight') === 1);
  await keel.stop();
  t.equal(keel.proc.exitCode, 0, 'clean shutdown on SIGTERM');

  const db = await openWorkerStore(path.join(keel.dir, 'data', 'worker'));
  t.teardown(() => db.close());
  let logRecords = 0;
  const partitionsWithLog = new Set();
  for await (const key of db.keys()) {
    const m = /^p(\d+)\/log\//.exec(key);
    if (m) {
      logRecords += 1;
      partitionsWithLog.add(Number(m[1]));
    }
  }
  t.ok(logRecords > 50, `the logs hold the commands (${logRecords})`);
  t.ok(partitionsWithLog.size >= 2, `invocations spread over partitions (${[...partitionsWithLog]})`);
  for (let p = 0; p < PARTITIONS; p++) t.same(await verifyPartition(db, p), [], `partition ${p} rebuilds to the stored state`);

  // The check can fail: a changed value, a missing key and an extra key are all reported.
  const statusKeys = [];
  const journalKeys = [];
  for await (const key of db.keys({ gte: 'p', lt: 'q' })) {
    if (/^p\d+\/s\/inv\//.test(key)) statusKeys.push(key);
    if (/^p\d+\/s\/j\//.test(key)) journalKeys.push(key);
  }
  t.ok(statusKeys.length >= 53 && journalKeys.length > 0);
  const changed = statusKeys[0];
  const pOf = (key) => Number(/^p(\d+)\//.exec(key)[1]);
  const value = JSON.parse((await db.get(changed)).toString('utf8'));
  value.status = value.status === 'completed' ? 'running' : 'completed';
  await db.put(changed, Buffer.from(JSON.stringify(value)));
  t.same(await verifyPartition(db, pOf(changed)), [changed], 'a changed status is reported');

  const missing = journalKeys[journalKeys.length - 1];
  await db.del(missing);
  const extra = `p${pOf(missing)}/s/inv/inv_1bogus`;
  await db.put(extra, Buffer.from('{}'));
  const reported = await verifyPartition(db, pOf(missing));
  t.ok(reported.includes(missing), 'a missing journal entry is reported');
  t.ok(reported.includes(extra), 'a key that the log does not produce is reported');
});

t.test('a partition with 300,000 outbox entries opens, and its Shuffle delivers them in sequence order, a bounded number at a time', async (t) => {
  const { loadState } = await import('../dist/partition/recovery.js');
  const { Shuffle, OUTBOX_IN_FLIGHT_LIMIT } = await import('../dist/partition/shuffle.js');
  const { outboxTable } = await import('../dist/storage/tables/outbox.js');
  const { fsmTable } = await import('../dist/storage/tables/fsm.js');
  const dir = (await import('node:fs')).mkdtempSync(path.join((await import('node:os')).tmpdir(), 'keel-outbox-'));
  t.teardown(() => import('node:fs').then((fs) => fs.rmSync(dir, { recursive: true, force: true })));
  const db = await openWorkerStore(dir);
  t.teardown(() => db.close());
  const N = 300_000;
  // Written out of order: the store sorts them.
  for (let from = N; from > 0; from -= 10_000) {
    const batch = db.batch();
    for (let seq = from; seq > from - 10_000; seq--) {
      batch.put(outboxTable.key(0, seq), outboxTable.encode({ seq, target: 'inc_x', command: Buffer.from([seq & 0xff]) }));
    }
    await batch.write();
  }
  await db.put(fsmTable.key(0), fsmTable.encode({ inbox_seq: 0, outbox_seq: N, timers: 0, outbox: N, statuses: {}, subscriptions: {} }));
  // Before: Math.max(0, ...outbox.keys()) threw a RangeError (reported as a corrupt store); then
  // the whole outbox was loaded into memory at open.
  const heapBefore = process.memoryUsage().heapUsed;
  const state = await loadState(db, 0);
  t.equal(state.counters.outbox, N);
  t.ok(process.memoryUsage().heapUsed - heapBefore < 64 * 1024 * 1024, 'the open did not load the outbox');
  const sent = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const logger = { warn() {}, info() {}, error() {}, debug() {} };
  await new Promise((resolve) => {
    const shuffle = new Shuffle(0, {
      read: (from, limit) => outboxTable.read(db, 0, from, limit),
      send: (e) => {
        sent.push(e.seq);
        maxInFlight = Math.max(maxInFlight, ++inFlight);
        if (sent.length === N) setImmediate(resolve);
        return new Promise((r) => setImmediate(r)).then(() => inFlight--);
      },
    }, logger);
    shuffle.start();
    t.teardown(() => shuffle.stop());
  });
  t.equal(sent.length, N, 'every entry sent once');
  t.ok(sent.every((s, i) => s === i + 1), 'in sequence order');
  t.ok(maxInFlight <= OUTBOX_IN_FLIGHT_LIMIT, `at most ${OUTBOX_IN_FLIGHT_LIMIT} in flight (${maxInFlight})`);
});

t.test('a store of format 2 is upgraded at open: the state-keys index is built from the state table', async (t) => {
  const fs = await import('node:fs');
  const os = await import('node:os');
  const { stateTable } = await import('../dist/storage/tables/state.js');
  const { stateKeysTable } = await import('../dist/storage/tables/state-keys.js');
  const { upgradeWorkerStore } = await import('../dist/storage/upgrade.js');
  const { PartitionState } = await import('../dist/partition/state.js');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-upgrade-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  let db = await openWorkerStore(dir);
  const b64 = (s) => Buffer.from(s).toString('base64url');
  for (const [p, obj, key] of [[0, 'Obj/a', 'x'], [0, 'Obj/a', 'y'], [0, 'Obj/b', 'z'], [2, 'Other/c', 'w']]) {
    await db.put(stateTable.key(p, obj, b64(key)), Buffer.from(`"${key}"`));
  }
  // Partition 1 has no keys at all (never used): partition 2 is found all the same, and so is 12
  // (after 1, before 2 in key order). Two timers stored in partition 2, counted by the upgrade.
  await db.put(stateTable.key(12, 'Obj/d', b64('v')), Buffer.from('"v"'));
  await db.put('p2/s/timer/0000000000001000/inv_x/0.1', Buffer.alloc(0));
  await db.put('p2/s/timer/0000000000002000/inv_y/0.1', Buffer.alloc(0));
  await db.put('p2/s/counters', Buffer.from('{"inbox_seq":3,"outbox_seq":4}'));
  // Three unfinished invocations in partition 2 (format 3's live index) and one completed: the
  // upgrade to 4 counts them by status and subscription and indexes the one that runs to restart.
  const { invocationsTable } = await import('../dist/storage/tables/invocations.js');
  const { liveTable } = await import('../dist/storage/tables/live.js');
  const { restartTable } = await import('../dist/storage/tables/restart.js');
  const inv = (id, status, extra = {}) => ({ id, service: 'S', handler: 'h', key: '', service_type: 'Service', handler_type: '', status, epoch: 0, journal_length: 1, created_at_ms: 1, modified_at_ms: 1, retry_count: 0, completion_retention_ms: 0, journal_retention_ms: 0, ...extra });
  for (const s of [inv('inv_run', 'running'), inv('inv_sleep', 'suspended', { invoked_by_subscription_id: 'sub_1' }), inv('inv_sleep2', 'suspended'), inv('inv_done', 'completed')]) {
    await db.put(invocationsTable.key(2, s.id), invocationsTable.encode(s));
    if (s.status !== 'completed') await db.put(liveTable.key(2, s.id), liveTable.value);
  }
  await db.close();
  fs.writeFileSync(path.join(dir, 'KEEL_STORAGE_VERSION'), '2\n');
  await t.rejects(openWorkerStore(dir), /RT0009|format version '2'/, 'refused without an upgrade');
  db = await openWorkerStore(dir, { upgrade: upgradeWorkerStore });
  t.teardown(() => db.close());
  t.equal(fs.readFileSync(path.join(dir, 'KEEL_STORAGE_VERSION'), 'utf8').trim(), '4');
  t.same(stateKeysTable.decode(await db.get(stateKeysTable.key(0, 'Obj/a'))), [b64('x'), b64('y')]);
  t.same(stateKeysTable.decode(await db.get(stateKeysTable.key(0, 'Obj/b'))), [b64('z')]);
  t.same(stateKeysTable.decode(await db.get(stateKeysTable.key(2, 'Other/c'))), [b64('w')]);
  t.same(stateKeysTable.decode(await db.get(stateKeysTable.key(12, 'Obj/d'))), [b64('v')], 'partition 12, found by seeking');
  t.same(
    JSON.parse(await db.get('p2/s/counters')),
    { inbox_seq: 3, outbox_seq: 4, timers: 2, outbox: 0, statuses: { running: 1, suspended: 2 }, subscriptions: { sub_1: 1 } },
    'the timers and the unfinished invocations counted into the counters',
  );
  t.same(JSON.parse(await db.get('p0/s/counters')), { inbox_seq: 0, outbox_seq: 0, timers: 0, outbox: 0, statuses: {}, subscriptions: {} });
  const restarting = [];
  for await (const id of restartTable.scan(db, 2)) restarting.push(id);
  t.same(restarting, ['inv_run'], 'only the invocation that runs is indexed to restart');
  const state = new PartitionState(0, 1);
  state.loader = (key) => db.getSync(key);
  t.same([...state.stateOf('Obj/a').keys()], [b64('x'), b64('y')], 'read through the index with no cache');
});
