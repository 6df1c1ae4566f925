// Crash recovery of a real Keel process: SIGKILL during a durable sleep, registrations that
// survive a restart, and the rebuild check (state folded again from the log equals the store).
import t from 'tap';
import path from 'node:path';
import { startKeel, serveServices, register, ingress, eventually, query } from './helpers/keel.mjs';
import { countingGreeter, failingServices, workService } from './services/core-services.mjs';
import { openWorkerStore, WORKER_FORMAT_VERSION } from '../dist/storage/store.js';
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
  // Format 4 and before keyed them by the id's text; format 5 moves them (uuid first).
  const { InvocationId } = await import('../dist/common/ids.js');
  const [run, sleep, sleep2, done] = Array.from({ length: 4 }, () => InvocationId.random(0n).text);
  const inv = (id, status, extra = {}) => ({ id, service: 'S', handler: 'h', key: '', service_type: 'Service', handler_type: '', status, epoch: 0, journal_length: 1, created_at_ms: 1, modified_at_ms: 1, retry_count: 0, completion_retention_ms: 0, journal_retention_ms: 0, ...extra });
  for (const s of [inv(run, 'running'), inv(sleep, 'suspended', { invoked_by_subscription_id: 'sub_1' }), inv(sleep2, 'suspended'), inv(done, 'completed')]) {
    await db.put(`p2/s/inv/${s.id}`, invocationsTable.encode(s));
    if (s.status !== 'completed') await db.put(`p2/s/live/${s.id}`, liveTable.value);
  }
  await db.close();
  fs.writeFileSync(path.join(dir, 'KEEL_STORAGE_VERSION'), '2\n');
  await t.rejects(openWorkerStore(dir), /RT0009|format version '2'/, 'refused without an upgrade');
  db = await openWorkerStore(dir, { upgrade: upgradeWorkerStore });
  t.teardown(() => db.close());
  t.equal(fs.readFileSync(path.join(dir, 'KEEL_STORAGE_VERSION'), 'utf8').trim(), String(WORKER_FORMAT_VERSION));
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
  t.same(restarting, [run], 'only the invocation that runs is indexed to restart');
  t.equal(invocationsTable.decode(await db.get(invocationsTable.key(2, done))).status, 'completed', 'statuses under their format 5 keys');
  const state = new PartitionState(0, 1);
  state.loader = (key) => db.getSync(key);
  t.same([...state.stateOf('Obj/a').keys()], [b64('x'), b64('y')], 'read through the index with no cache');
});

t.test('a store of format 4 is upgraded at open: the tables of invocations keyed uuid first, a partial move finished, format 4 snapshots load as format 5', async (t) => {
  const fs = await import('node:fs');
  const os = await import('node:os');
  const { InvocationId } = await import('../dist/common/ids.js');
  const { invocationsTable } = await import('../dist/storage/tables/invocations.js');
  const { journalTable } = await import('../dist/storage/tables/journal.js');
  const { liveTable } = await import('../dist/storage/tables/live.js');
  const { restartTable } = await import('../dist/storage/tables/restart.js');
  const { logTable } = await import('../dist/storage/tables/log.js');
  const { upgradeWorkerStore } = await import('../dist/storage/upgrade.js');
  const { DirectorySnapshotStore, snapshotPartition, restorePartition } = await import('../dist/storage/snapshots.js');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-upgrade4-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const ids = Array.from({ length: 300 }, (_, i) => InvocationId.random(BigInt(i) * 7919n).text);
  // What format 4 wrote: every table keyed by the id's text.
  const format4 = [];
  for (const [i, id] of ids.entries()) {
    format4.push([`p3/s/inv/${id}`, Buffer.from(JSON.stringify({ id }))]);
    format4.push([`p3/s/live/${id}`, Buffer.alloc(0)]);
    if (i % 3 === 0) format4.push([`p3/s/restart/${id}`, Buffer.alloc(0)]);
    for (let e = 0; e < 2; e++) format4.push([`p3/s/j/${id}/0000000${e}`, Buffer.from([0, 1, e])]);
  }
  format4.push(['p3/s/state/Obj%2Fa/x', Buffer.from('"kept"')], ['p3/s/counters', Buffer.from('{"inbox_seq":0,"outbox_seq":0,"timers":0,"outbox":0,"statuses":{},"subscriptions":{}}')]);
  let db = await openWorkerStore(path.join(dir, 'w'));
  for (const [k, v] of format4) await db.put(k, v);
  // A crash part-way through an earlier upgrade: the first id already moved, its old keys gone.
  for (const [k, v] of format4.filter(([k]) => k.includes(ids[0]))) {
    await db.del(k);
    const format5 = k.startsWith('p3/s/j/') ? journalTable.key(3, ids[0], Number(k.slice(-8))) : k.startsWith('p3/s/inv/') ? invocationsTable.key(3, ids[0]) : k.startsWith('p3/s/live/') ? liveTable.key(3, ids[0]) : restartTable.key(3, ids[0]);
    await db.put(format5, v);
  }
  await db.close();
  fs.writeFileSync(path.join(dir, 'w', 'KEEL_STORAGE_VERSION'), '4\n');
  db = await openWorkerStore(path.join(dir, 'w'), { upgrade: upgradeWorkerStore });
  t.teardown(() => db.close());
  t.equal(fs.readFileSync(path.join(dir, 'w', 'KEEL_STORAGE_VERSION'), 'utf8').trim(), String(WORKER_FORMAT_VERSION));
  let keys = 0;
  let format4Left = 0;
  for await (const key of db.keys({ gte: 'p3/', lt: 'p3/~' })) {
    keys += 1;
    if (key.includes('/inv_1')) format4Left += 1;
  }
  t.equal(keys, format4.length, 'as many keys as before');
  t.equal(format4Left, 0, 'no key of format 4 is left');
  const statuses = [];
  for await (const s of invocationsTable.scan(db, 3)) statuses.push(s.id);
  t.same(statuses.sort(), [...ids].sort(), 'every status read back by its id');
  const live = [];
  for await (const id of liveTable.scan(db, 3)) live.push(id);
  t.same(live.sort(), [...ids].sort(), 'the live index names the same ids');
  const restarting = [];
  for await (const id of restartTable.scan(db, 3)) restarting.push(id);
  t.same(restarting.sort(), ids.filter((_, i) => i % 3 === 0).sort());
  t.same((await journalTable.read(db, 3, ids[7])).map((e) => e.payload[0]), [0, 1], 'a journal read back in order');
  t.equal((await db.get('p3/s/state/Obj%2Fa/x')).toString(), '"kept"', 'other tables untouched');
  const { locksTable } = await import('../dist/storage/tables/locks.js');
  t.same(locksTable.decode(Buffer.from(ids[0])), { id: ids[0] }, "a lock of format 4 (the holder's id alone) reads as held since no known time");
  t.same(locksTable.decode(locksTable.encode(ids[0], 1_800_000_000_123)), { id: ids[0], acquired_at_ms: 1_800_000_000_123 });

  // A snapshot taken by a node still on format 4 loads into a format 5 store.
  const snapshots = new DirectorySnapshotStore(path.join(dir, 'snapshots'));
  const old = await openWorkerStore(path.join(dir, 'old'));
  t.teardown(() => old.close());
  for (const [k, v] of format4) await old.put(k, v);
  await old.put(logTable.cursorKey(3), logTable.encodeCursor({ offset: 10, epoch: 1, position: 9 }));
  const written = await snapshotPartition(old, 3, snapshots);
  const current = `-f${WORKER_FORMAT_VERSION}`;
  t.ok(written.name.endsWith(`${current}.keel-snapshot`), 'a snapshot is named with its format (which a format 4 node does not take)');
  // What a node of format 4 wrote: its name has no format.
  const dirOf = path.join(dir, 'snapshots', 'p3');
  fs.renameSync(path.join(dirOf, written.name), path.join(dirOf, written.name.replace(current, '')));
  fs.writeFileSync(path.join(dirOf, written.name.replace(current, `-f${WORKER_FORMAT_VERSION + 1}`).replace(/^o0+10-/, 'o00000000000000000011-')), 'a newer Keel wrote this');
  const [taken, ...others] = await snapshots.list(3);
  t.equal(taken.format, 4, 'listed as format 4');
  t.same(others, [], "a newer format's snapshot is not listed");
  const fresh = await openWorkerStore(path.join(dir, 'fresh'));
  t.teardown(() => fresh.close());
  await restorePartition(fresh, taken, snapshots);
  const restored = [];
  for await (const s of invocationsTable.scan(fresh, 3)) restored.push(s.id);
  t.same(restored.sort(), [...ids].sort(), 'the restored statuses are under format 5 keys');
  t.same((await journalTable.read(fresh, 3, ids[7])).map((e) => e.payload[0]), [0, 1]);
});

t.test('a real server on a store written in format 4: upgraded at start, the sleeping invocation wakes, the completed one is found by its idempotency key', async (t) => {
  const fs = await import('node:fs');
  const { idOfKeyText } = await import('../dist/storage/keys.js');
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '2' } });
  const quick = countingGreeter({ name: 'Quick', sleep_ms: 10 });
  const slow = countingGreeter({ name: 'Slow', sleep_ms: 4000 });
  await register(keel, await serveServices(t, [quick.service, slow.service]));
  const first = await ingress(keel, '/Quick/greet', { name: 'once' }, { 'idempotency-key': 'k1' });
  t.same(first.body, { result: 'You said hi to once!' });
  t.equal((await ingress(keel, '/Slow/greet/send', { name: 'sleeper' })).status, 202);
  await eventually(() => slow.count('Notification', 'sleeper') === 1);
  await sleep(500); // into the sleep
  const before = await query(keel, 'SELECT id, target_service_name AS service FROM sys_invocation ORDER BY id');
  await keel.stop();

  // Back to what format 4 wrote: the tables of invocations keyed by the id's text.
  const worker = path.join(keel.dir, 'data', 'worker');
  const db = await openWorkerStore(worker);
  let moved = 0;
  for await (const [key, value] of db.iterator({ gte: 'p', lt: 'q' })) {
    const m = /^(p\d+\/s\/(?:inv|live|restart|j)\/)([0-9a-zA-Z]{33})(\/.*)?$/.exec(key);
    if (m === null) continue;
    await db.batch().del(key).put(`${m[1]}${idOfKeyText(m[2])}${m[3] ?? ''}`, value).write();
    moved += 1;
  }
  await db.close();
  t.ok(moved >= 8, `${moved} keys put back as format 4 had them`);
  fs.writeFileSync(path.join(worker, 'KEEL_STORAGE_VERSION'), '4\n');

  await keel.launch();
  t.match(keel.logs(), new RegExp(`"from":4,"to":${WORKER_FORMAT_VERSION},"took_ms":\\d+,"msg":"worker storage upgraded"`), 'the upgrade is logged');
  t.same(await query(keel, 'SELECT id, target_service_name AS service FROM sys_invocation ORDER BY id'), before, 'the same invocations');
  const again = await ingress(keel, '/Quick/greet', { name: 'once' }, { 'idempotency-key': 'k1' });
  t.same(again.body, first.body, 'the completed invocation answers its idempotency key');
  t.equal(quick.count('Notification'), 1, 'and did not run again');
  await eventually(() => slow.count('Reminder', 'sleeper') === 1, { timeout_ms: 20_000 });
  t.equal(slow.count('Notification', 'sleeper'), 1, 'the sleeper woke where it slept');
});

t.test('worker.storage_db.write_buffer_size reaches the store: a small buffer writes table files where the default keeps the writes in memory', async (t) => {
  const fs = await import('node:fs');
  // 4 MiB is LevelDB's own default: the default must differ from it to be the setting at work.
  const tables = async (bufferSize) => {
    const keel = await startKeel(t, { env: bufferSize === undefined ? {} : { KEEL_WORKER__STORAGE_DB__WRITE_BUFFER_SIZE: bufferSize } });
    const g = countingGreeter({ name: 'Buffered', sleep_ms: 1 });
    await register(keel, await serveServices(t, [g.service]));
    // ~100 calls of 24 KiB in and out: ~10 MB through the log and the journals.
    for (let round = 0; round < 4; round++) {
      const answers = await Promise.all(Array.from({ length: 25 }, (_, i) => ingress(keel, '/Buffered/greet', { name: `n${round}-${i}-${'x'.repeat(24 * 1024)}` })));
      t.ok(answers.every((a) => a.status === 200), `round ${round} answered`);
    }
    await keel.stop();
    return fs.readdirSync(path.join(keel.dir, 'data', 'worker', 'db')).filter((f) => f.endsWith('.ldb')).length;
  };
  t.ok((await tables('64KiB')) > 0, 'with 64 KiB, table files');
  t.ok((await tables('4MiB')) > 0, "with LevelDB's 4 MiB, table files");
  t.equal(await tables(undefined), 0, 'with the default (32 MiB), none yet');
});
