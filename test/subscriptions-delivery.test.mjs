// Kafka subscriptions delivering records to real SDK handlers through a real Keel process, on
// librdkafka's mock cluster (test/helpers/kafka.mjs): service and object sinks with the record's
// headers and Restate's, order per key, exactly once across a SIGKILL (checked from the handlers'
// own state), back-pressure and lag, a broker down at start and mid-stream, delete, and options
// refused with META0009. Every new consumer group costs the mock's ~3 s join delay.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import { startKafkaMock } from './helpers/kafka.mjs';
import { startKeel, serveServices, register, ingress, tempDir, adminCall as admin, query, eventually } from './helpers/keel.mjs';

/** The mock forgets a member that left only when its session expires: keep sessions short. */
const QUICK = { 'auto.offset.reset': 'earliest', 'session.timeout.ms': '3000', 'heartbeat.interval.ms': '300' };

/** Keel on the mock cluster (`[[ingress.kafka_clusters]]` name "mock"). */
async function keelOn(t, mock, { env = {}, dir } = {}) {
  const file = path.join(tempDir(t), 'keel.toml');
  fs.writeFileSync(file, `[[ingress.kafka_clusters]]\nname = "mock"\nbrokers = [${mock.brokers.map((b) => JSON.stringify(b)).join(', ')}]\n`);
  return startKeel(t, { args: ['--config', file], env, ...(dir ? { dir } : {}) });
}

async function subscribe(t, keel, topic, sink, options = QUICK) {
  const r = await admin(keel, 'POST', '/subscriptions', { source: `kafka://mock/${topic}`, sink, options });
  t.equal(r.status, 201, `subscription ${topic} → ${sink}: ${r.text}`);
  return r.json.id;
}

/** `n` JSON records `{ i }`, keyed `k0`…`k{keys-1}` round robin, with one header of their own. */
function records(n, keys, from = 0) {
  return Array.from({ length: n }, (_, j) => {
    const i = from + j;
    return { key: `k${i % keys}`, value: JSON.stringify({ i }), headers: { 'x-origin': `test-${i}` } };
  });
}

const status = async (keel, id) => (await admin(keel, 'GET', `/subscriptions/${id}/status`)).json;

t.test('service and object sinks: every record once, with its headers, each key in offset order; visible in the admin API and SQL', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.createTopic('orders', 4);
  await mock.createTopic('events', 3);
  const seen = [];
  const orders = restate.service({
    name: 'Orders',
    handlers: {
      process: async (ctx, input) => {
        seen.push({ input, headers: Object.fromEntries(ctx.request().headers), id: ctx.request().id });
        return 'ok';
      },
    },
  });
  const ledger = restate.object({
    name: 'Ledger',
    handlers: {
      add: async (ctx, input) => {
        const offsets = (await ctx.get('offsets')) ?? [];
        offsets.push(Number(ctx.request().headers.get('kafka.offset')));
        ctx.set('offsets', offsets);
        const items = (await ctx.get('items')) ?? [];
        items.push(input.i);
        ctx.set('items', items);
      },
      get: restate.handlers.object.shared(async (ctx) => ({ offsets: (await ctx.get('offsets')) ?? [], items: (await ctx.get('items')) ?? [] })),
    },
  });
  const runs = [];
  const signup = restate.workflow({
    name: 'Signup',
    handlers: {
      run: async (ctx, input) => {
        runs.push({ key: ctx.key, i: input.i });
        return `welcome ${ctx.key}`;
      },
    },
  });
  const keel = await keelOn(t, mock);
  await register(keel, await serveServices(t, [orders, ledger, signup]));
  await mock.createTopic('signups', 1);
  await mock.produce('orders', records(40, 7));
  await mock.produce('events', records(300, 10));
  await mock.produce('signups', [{ key: 'ann', value: '{"i":1}' }, { key: 'bob', value: '{"i":2}' }, { key: 'ann', value: '{"i":3}' }]);
  const ordersSub = await subscribe(t, keel, 'orders', 'service://Orders/process');
  const eventsSub = await subscribe(t, keel, 'events', 'service://Ledger/add', { ...QUICK, 'auto.commit.interval.ms': '300' });
  const signupsSub = await subscribe(t, keel, 'signups', 'service://Signup/run');

  await eventually(() => seen.length >= 40, { timeout_ms: 30_000 });
  const byI = new Map(seen.map((s) => [s.input.i, s]));
  t.equal(byI.size, 40, 'every record of the service sink once');
  const one = byI.get(3);
  t.match(one.headers, {
    'kafka.topic': 'orders',
    'kafka.offset': /^\d+$/,
    'kafka.partition': /^[0-3]$/,
    'kafka.timestamp': /^\d{13}$/,
    'restate.subscription.id': ordersSub,
    'kafka.key': Buffer.from('k3').toString('base64url'),
    'x-origin': 'test-3',
  }, "Restate's headers and the record's own");

  const keys = [...Array(10).keys()].map((k) => `k${k}`);
  const states = await eventually(async () => {
    const all = await Promise.all(keys.map(async (k) => (await ingress(keel, `/Ledger/${k}/get`)).body));
    return all.reduce((n, s) => n + s.items.length, 0) >= 300 ? all : undefined;
  }, { timeout_ms: 30_000 });
  for (const [k, s] of states.entries()) {
    t.same(s.items, [...Array(30).keys()].map((j) => j * 10 + k), `key k${k}: its 30 records, once each, in order`);
    t.same(s.offsets, [...s.offsets].sort((a, b) => a - b), `key k${k}: offsets ascend`);
  }

  // A workflow's run handler as the sink: each key is a workflow id; a key that ran does not run again.
  await eventually(async () => (await status(keel, signupsSub)).partitions[0]?.position === 3);
  t.same(runs.map((r) => r.key).sort(), ['ann', 'bob'], 'one run per workflow id');
  t.equal(runs.find((r) => r.key === 'ann').i, 1, "the first record of a key starts its run");
  const output = await fetch(`${keel.ingress}/restate/workflow/Signup/ann/output`);
  t.equal(await output.json(), 'welcome ann');

  const rows = await query(keel, `SELECT invoked_by, invoked_by_subscription_id, COUNT(*) AS n FROM sys_invocation WHERE target_handler_name IN ('process', 'add') GROUP BY invoked_by, invoked_by_subscription_id ORDER BY n`);
  t.same(rows, [
    { invoked_by: 'subscription', invoked_by_subscription_id: ordersSub, n: 40 },
    { invoked_by: 'subscription', invoked_by_subscription_id: eventsSub, n: 300 },
  ]);

  // Lag: Keel's stored position at the high watermark of every partition.
  const st = await eventually(async () => {
    const s = await status(keel, eventsSub);
    return s.partitions.length === 3 && s.partitions.every((p) => p.lag === 0) ? s : undefined;
  });
  t.match(st, { id: eventsSub, state: 'consuming', consumer_group: eventsSub, pending_invocations: 0 });
  t.equal(st.partitions.reduce((n, p) => n + p.records_delivered, 0), 300);
  t.ok(st.partitions.every((p) => p.position === p.high_watermark && p.assigned), JSON.stringify(st.partitions));
  // Kafka tools see the positions too: Keel commits them to the group (for visibility only).
  const kafkaAdmin = mock.kafka().admin();
  await kafkaAdmin.connect();
  t.teardown(() => kafkaAdmin.disconnect());
  const committed = await eventually(async () => {
    const [{ partitions }] = await kafkaAdmin.fetchOffsets({ groupId: eventsSub, topics: ['events'] });
    const sorted = partitions.map((p) => [p.partition, Number(p.offset)]).sort((a, b) => a[0] - b[0]);
    return sorted.every(([p, o]) => o === st.partitions[p].position) ? sorted : undefined;
  });
  t.equal(committed.length, 3, 'the group commits equal the positions');
  const sql = await query(keel, `SELECT subscription_id, SUM(records_delivered) AS delivered, SUM(lag) AS lag, COUNT(*) AS partitions FROM sys_subscription_partition GROUP BY subscription_id ORDER BY delivered`);
  t.same(sql, [
    { subscription_id: signupsSub, delivered: 3, lag: 0, partitions: 1 },
    { subscription_id: ordersSub, delivered: 40, lag: 0, partitions: 4 },
    { subscription_id: eventsSub, delivered: 300, lag: 0, partitions: 3 },
  ]);
  t.equal(keel.logLines('KEEL0701').length, 0, 'no consumer warnings');
  // kafkajs's idle request queue sets negative timers; on Node ≥ 22 Node warned of each on stderr
  t.same(keel.looseLines(), [], 'every line Keel wrote is a JSON log line');
});

/** A virtual object whose state lists the offsets and items it was given, in order. */
function ledgerObject(name, onAdd = () => {}) {
  return restate.object({
    name,
    handlers: {
      add: async (ctx, input) => {
        const items = (await ctx.get('items')) ?? [];
        items.push(input.i);
        ctx.set('items', items);
        onAdd(input);
      },
      get: restate.handlers.object.shared(async (ctx) => (await ctx.get('items')) ?? []),
    },
  });
}

/** Every key's items (`k0`…), once their total reaches `total`. */
async function itemsByKey(keel, name, keys, total, timeout_ms = 30_000) {
  return eventually(async () => {
    const all = await Promise.all([...Array(keys).keys()].map(async (k) => (await ingress(keel, `/${name}/k${k}/get`)).body));
    return all.reduce((n, items) => n + items.length, 0) >= total ? all : undefined;
  }, { timeout_ms });
}

t.test('exactly once across SIGKILLs mid-stream: 300 records over 10 keys, each key in order, none twice', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.createTopic('ledger', 4);
  let calls = 0;
  const keel = await keelOn(t, mock);
  await register(keel, await serveServices(t, [ledgerObject('Ledger', () => calls++)]));
  await mock.produce('ledger', records(150, 10));
  const sub = await subscribe(t, keel, 'ledger', 'service://Ledger/add');
  await mock.produce('ledger', records(150, 10, 150));
  // Killed twice while records flow: some are done, some journalled or in flight, some not consumed.
  for (const at of [40, 170]) {
    await eventually(() => calls >= at, { timeout_ms: 60_000, interval_ms: 5 });
    await keel.kill('SIGKILL');
    t.ok(calls < 300, `killed mid-stream (${calls} handler calls so far)`);
    await keel.launch();
  }

  const items = await itemsByKey(keel, 'Ledger', 10, 300, 60_000);
  for (const [k, list] of items.entries()) t.same(list, [...Array(30).keys()].map((j) => j * 10 + k), `key k${k}: its 30 records once each, in order`);
  const st = await eventually(async () => {
    const s = await status(keel, sub);
    return s.partitions.length === 4 && s.partitions.every((p) => p.lag === 0) ? s : undefined;
  });
  t.equal(st.partitions.reduce((n, p) => n + p.records_delivered, 0), 300, 'the stored positions count 300 records');
  const [{ n }] = await query(keel, `SELECT COUNT(*) AS n FROM sys_invocation WHERE invoked_by = 'subscription'`);
  t.equal(n, 300, 'one invocation per record');
});

t.test('a broker down at start and mid-stream: warnings naming the subscription, everything else served, then every record once', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.createTopic('flaky', 2);
  const keel = await keelOn(t, mock);
  await register(keel, await serveServices(t, [ledgerObject('Ledger'), ledgerObject('Ghosts')]));
  await mock.down(1);
  const sub = await subscribe(t, keel, 'flaky', 'service://Ledger/add');
  const warnings = () => keel.logLines('KEEL0701').filter((l) => l.subscription === sub);
  await eventually(() => warnings().length > 0, { timeout_ms: 20_000 });
  t.match(warnings()[0], { level: 40, subscription: sub, source: 'kafka://mock/flaky', msg: new RegExp(sub) }, 'a warning with code and subscription');
  t.equal((await ingress(keel, '/Ledger/k0/get')).status, 200, 'the ingress serves meanwhile');
  t.match(await status(keel, sub), { state: 'starting', last_warning: { code: 'KEEL0701' } });

  await mock.up(1);
  await mock.produce('flaky', records(20, 4));
  await itemsByKey(keel, 'Ledger', 4, 20);

  // A topic that does not exist: warned about, retried, consumed once it appears.
  await mock.topicError('ghost', 3); // UNKNOWN_TOPIC_OR_PARTITION in metadata
  const ghost = await subscribe(t, keel, 'ghost', 'service://Ghosts/add', { ...QUICK, 'reconnect.backoff.max.ms': '1000' });
  await eventually(() => keel.logLines('KEEL0701').some((l) => l.subscription === ghost && /ghost/.test(l.msg)), { timeout_ms: 20_000 });
  await mock.topicError('ghost', 0);
  await mock.produce('ghost', records(3, 1));
  await itemsByKey(keel, 'Ghosts', 1, 3, 30_000);

  // Mid-stream: the broker goes away while the consumer is in its group.
  const before = warnings().length;
  await mock.down(1);
  await eventually(() => warnings().length > before, { timeout_ms: 30_000 });
  t.equal((await ingress(keel, '/Ledger/k1/get')).status, 200, 'the ingress serves while the broker is down');
  await mock.up(1);
  await mock.produce('flaky', records(20, 4, 20));
  const items = await itemsByKey(keel, 'Ledger', 4, 40, 60_000);
  for (const [k, list] of items.entries()) t.same(list, [...Array(10).keys()].map((j) => j * 4 + k), `key k${k}: 10 records once each, in order`);
  t.equal(keel.proc.exitCode, null, 'Keel kept running');
  t.equal(keel.logLines('KEEL0701').filter((l) => l.level >= 50).length, 0, 'warnings, not errors');
});

t.test('back-pressure: consumption pauses while the sink has too many invocations pending, the lag shows, and it resumes by itself', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.createTopic('slow', 1);
  const waiting = [];
  const done = new Set();
  const slow = restate.service({
    name: 'Slow',
    handlers: {
      take: async (ctx, input) => {
        await ctx.run('wait', () => new Promise((resolve) => waiting.push(resolve)));
        done.add(input.i);
      },
    },
  });
  const keel = await keelOn(t, mock, { env: { KEEL_INGRESS__KAFKA_MAX_PENDING_INVOCATIONS: '5' } });
  await register(keel, await serveServices(t, [slow]));
  // More than one chunk (500 records) in Kafka: the first chunk passes the limit, the rest waits.
  await mock.produce('slow', records(1000, 1));
  const sub = await subscribe(t, keel, 'slow', 'service://Slow/take');
  const paused = await eventually(async () => {
    const s = await status(keel, sub);
    return s.state === 'paused' ? s : undefined;
  }, { timeout_ms: 20_000 });
  t.match(paused, { pending_invocations: 500, max_pending_invocations: 5, reason: /500 of its invocations have not completed/ });
  t.match(paused.partitions, [{ partition: 0, position: 500, paused: true }], 'the second chunk was not taken');
  await mock.produce('slow', records(6, 1, 1000));
  const lagging = await eventually(async () => {
    const s = await status(keel, sub);
    return s.partitions[0]?.lag === 506 ? s : undefined;
  });
  t.match(lagging.partitions[0], { position: 500, high_watermark: 1006, lag: 506 }, 'the rest waits in Kafka');
  t.equal(keel.logLines('KEEL0704').length, 1, 'the pause is logged once, with its code');
  t.equal(keel.logLines('KEEL0701').length, 0, 'and is no warning');

  // The handlers finish: below half the limit, consumption resumes on its own.
  const release = setInterval(() => waiting.splice(0).forEach((r) => r()), 20);
  t.teardown(() => clearInterval(release));
  await eventually(() => done.size >= 1006, { timeout_ms: 60_000 });
  const after = await eventually(async () => {
    const s = await status(keel, sub);
    return s.state === 'consuming' && s.partitions[0].lag === 0 ? s : undefined;
  });
  t.match(after.partitions[0], { position: 1006, records_delivered: 1006 }, 'every record once');
  const [{ n }] = await query(keel, `SELECT COUNT(*) AS n FROM sys_invocation WHERE invoked_by = 'subscription'`);
  t.equal(n, 1006);
});

t.test('deleting a subscription stops its consumer; a sink that is gone pauses it, nothing skipped', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.createTopic('gone', 1);
  await mock.createTopic('paused', 1);
  let calls = 0;
  const keel = await keelOn(t, mock);
  const uri = await serveServices(t, [ledgerObject('Ledger', () => calls++)]);
  const dep = await register(keel, uri);
  await mock.produce('gone', records(5, 1));
  const sub = await subscribe(t, keel, 'gone', 'service://Ledger/add');
  await eventually(() => calls >= 5, { timeout_ms: 20_000 });
  t.equal((await admin(keel, 'DELETE', `/subscriptions/${sub}`)).status, 202);
  await eventually(() => /subscription stopped consuming/.test(keel.logs()));
  await mock.produce('gone', records(5, 1, 5));
  await new Promise((r) => setTimeout(r, 1500));
  t.equal(calls, 5, 'records produced after the delete are not delivered');
  t.equal((await admin(keel, 'GET', `/subscriptions/${sub}/status`)).status, 404);

  // The sink's deployment goes away: the consumer pauses instead of losing records.
  const other = await subscribe(t, keel, 'paused', 'service://Ledger/add');
  t.equal((await admin(keel, 'DELETE', `/deployments/${dep.id}?force=true`)).status, 202);
  await mock.produce('paused', records(3, 1, 100));
  const st = await eventually(async () => {
    const s = await status(keel, other);
    return s.state === 'paused' ? s : undefined;
  }, { timeout_ms: 20_000 });
  t.match(st, { reason: /not registered/, last_warning: { code: 'KEEL0703' } });
  await register(keel, uri);
  const items = await eventually(async () => {
    const r = await ingress(keel, '/Ledger/k0/get');
    return r.body.length >= 8 ? r.body : undefined;
  }, { timeout_ms: 20_000 });
  t.same(items, [0, 1, 2, 3, 4, 100, 101, 102], 'the paused records arrive once the sink is back');
});

t.test('options Keel cannot honour are refused with META0009', async (t) => {
  const mock = await startKafkaMock(t);
  const keel = await keelOn(t, mock);
  await register(keel, await serveServices(t, [ledgerObject('Ledger')]));
  for (const [options, why] of [
    [{ 'partition.assignment.strategy': 'range' }, /partition.assignment.strategy/],
    [{ 'enable.idempotence': 'true' }, /enable.idempotence.*not supported/],
    [{ 'session.timeout.ms': 'soon' }, /session.timeout.ms.*integer/],
  ]) {
    const r = await admin(keel, 'POST', '/subscriptions', { source: 'kafka://mock/x', sink: 'service://Ledger/add', options });
    t.equal(r.status, 400, r.text);
    t.equal(r.json.restate_code, 'META0009');
    t.match(r.json.message, why);
  }
});

t.test('a rebalance: another member takes partitions and rewinds the group commits; Keel resumes from its own positions', async (t) => {
  const mock = await startKafkaMock(t, { control: true });
  await mock.createTopic('shared', 4);
  const keel = await keelOn(t, mock);
  await register(keel, await serveServices(t, [ledgerObject('Ledger')]));
  await mock.produce('shared', records(40, 8));
  const sub = await subscribe(t, keel, 'shared', 'service://Ledger/add');
  await itemsByKey(keel, 'Ledger', 8, 40);

  // A second member of the subscription's group (the group id is the subscription id).
  const other = mock.kafka().consumer({ groupId: sub, sessionTimeout: 3000, heartbeatInterval: 300, rebalanceTimeout: 4000 });
  let held = [];
  other.on(other.events.GROUP_JOIN, (e) => (held = e.payload.memberAssignment.shared ?? []));
  await other.connect();
  await other.subscribe({ topics: ['shared'], fromBeginning: true });
  await other.run({ autoCommit: false, eachBatchAutoResolve: false, eachBatch: async () => {} });
  t.teardown(() => other.disconnect().catch(() => {}));
  await eventually(async () => held.length > 0 && (await status(keel, sub)).partitions.filter((p) => p.assigned).length === 4 - held.length, { timeout_ms: 30_000 });
  // It rewinds the group's committed offsets: Keel does not read them back.
  await other.commitOffsets(held.map((partition) => ({ topic: 'shared', partition, offset: '0' })));
  await mock.produce('shared', records(40, 8, 40));
  await other.disconnect();
  await eventually(async () => (await status(keel, sub)).partitions.filter((p) => p.assigned).length === 4, { timeout_ms: 30_000 });
  const items = await itemsByKey(keel, 'Ledger', 8, 80, 30_000);
  for (const [k, list] of items.entries()) t.same(list, [...Array(10).keys()].map((j) => j * 8 + k), `key k${k}: 10 records once each, in order`);
});
