// Keel nodes on a real Apache Kafka cluster (3 brokers, KRaft, on loopback, started once for the
// file): the partition logs and the metadata live in Kafka, so a node's disk is a copy. A node
// is SIGKILLed and a new one with an empty disk takes its place: every acknowledged invocation
// completes exactly once, no recorded step runs again, object state is the fold of its calls.
import t from 'tap';
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { launch, newPage } from './helpers/browser.mjs';
import { startKafkaCluster } from './helpers/kafka-cluster.mjs';
import { loadOn, longestGap, resumed } from './helpers/cluster-load.mjs';
import { awakeables, counter, flow, ledger, stepRuns, steps, waiter } from './services/cluster-services.mjs';
import { startKeel, serveServices, register, ingress, eventually, tempDir, query, freePort, adminCall as admin } from './helpers/keel.mjs';

const kafka = await startKafkaCluster(t, { brokers: 3 });
let topics = 0;

const endpoint = await serveServices(t, [steps, counter, flow, waiter, ledger]);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** A node's JSON log lines, parsed. */
const jsonLines = (output) => output.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));

/** A Keel node of the cluster on `topic`, with its own (empty) directory; sessions of 2 s. */
function node(t, name, topic, args = [], env = {}, dir = undefined) {
  return startKeel(t, {
    args,
    ...(dir !== undefined ? { dir } : {}),
    env: {
      ...env,
      KEEL_CLUSTER__BROKERS: kafka.brokers.join(','),
      KEEL_CLUSTER__NODE_NAME: name,
      KEEL_CLUSTER__LOG_TOPIC: topic,
      KEEL_CLUSTER__SESSION_TIMEOUT: '2s',
      // One node leads every partition, the others stand by (cluster-spread.test.mjs: the default, spread).
      KEEL_CLUSTER__SPREAD_PARTITIONS: 'false',
      KEEL_WORKER__PARTITIONS: '4',
    },
  });
}

/** Waits until `keel` says it is the active node. */
async function active(keel) {
  await eventually(async () => (await admin(keel, 'GET', '/cluster')).json?.role === 'active', { timeout_ms: 30_000 });
  return keel;
}

let stopCalls = false;
/** POSTs until an answer other than 503 comes (a failover answers 503 KEEL0803 meanwhile). */
async function call(keel, pathname, body, headers = {}) {
  for (;;) {
    const res = await ingress(keel, pathname, body, { ...headers }).catch((err) => ({ status: 0, body: String(err) }));
    if (stopCalls) return res;
    if (res.status !== 503 && res.status !== 0) return res;
    await sleep(50);
  }
}

t.test('a SIGKILLed node is replaced by a node with an empty disk: nothing acknowledged is lost or done twice', async (t) => {
  const topic = `keel-${++topics}`;
  const a = await active(await node(t, 'a', topic));
  await register(a, endpoint);
  const calls = await Promise.all(Array.from({ length: 20 }, (_, i) => ingress(a, '/Steps/run', { id: `call-${i}` })));
  t.same(calls.map((c) => c.status), Array(20).fill(200), 'twenty calls answered by node a');
  // A 3 MB input: its batch is larger than Kafka's default record batch limit (1 MiB).
  const big = await ingress(a, '/Steps/run', { id: 'big', pad: 'x'.repeat(3_000_000) });
  t.same([big.status, big.body], [200, 'done big'], 'a call with a 3 MB input is appended to the Kafka log');
  let sum = 0;
  for (let i = 1; i <= 10; i++) {
    const res = await ingress(a, '/Counter/k/add', i);
    sum += i;
    t.equal(res.body, sum);
  }
  // Delayed sends: accepted by a, due after a is gone.
  const sends = await Promise.all(Array.from({ length: 10 }, (_, i) => ingress(a, '/Steps/run/send?delay=3s', { id: `later-${i}` })));
  t.same(sends.map((s) => s.status), Array(10).fill(202), 'ten delayed sends accepted');
  // A workflow waiting for its promise and a call waiting on an awakeable, both started on a.
  t.equal((await ingress(a, '/Flow/f1/run/send', { tag: 'f1' })).status, 202);
  const waiting = await ingress(a, '/Waiter/wait/send', { id: 'w1' }, { 'idempotency-key': 'waiter-1' });
  t.equal(waiting.status, 202);
  await eventually(() => awakeables.has('w1'));
  const killedAt = Date.now();
  await a.kill('SIGKILL');

  const b = await active(await node(t, 'b', topic));
  const { json: deployments } = await admin(b, 'GET', '/deployments');
  t.equal(deployments.deployments?.length, 1, 'the deployment registered on a is known to b (the metadata log)');
  t.equal((await ingress(b, '/Counter/k/get')).body, sum, "the object's state is the fold of its ten calls");
  t.comment(`b answered ${Date.now() - killedAt} ms after a was SIGKILLed (its start included)`);
  await eventually(() => [...Array(10).keys()].every((i) => stepRuns.get(`later-${i}`) === 1), { timeout_ms: 20_000 });
  t.pass('every delayed send ran on b, once');
  t.same([...Array(20).keys()].map((i) => stepRuns.get(`call-${i}`)), Array(20).fill(1), 'no recorded step of the calls ran again');
  // The workflow and the awakeable, completed through b.
  t.equal((await ingress(b, '/Flow/f1/approve', 'yes')).status, 200, "the workflow's promise resolved through b");
  const output = await fetch(`${b.ingress}/restate/workflow/Flow/f1/output`);
  t.same([output.status, await output.json()], [200, 'f1:yes'], "the workflow started on a completes on b");
  t.equal((await ingress(b, `/restate/awakeables/${awakeables.get('w1')}/resolve`, 42)).status, 202, 'the awakeable resolved through b');
  const woken = await eventually(async () => {
    const r = await fetch(`${b.ingress}/restate/invocation/${waiting.body.invocationId}/output`);
    return r.status === 200 ? r.json() : undefined;
  });
  t.equal(woken, 'woken with 42', 'the call waiting on it completes on b');
  const more = await ingress(b, '/Counter/k/add', 100);
  t.equal(more.body, sum + 100, 'b goes on from the state a left');
  await b.stop();
});

t.test('standbys forward to the active node and follow the metadata; a SIGKILLed active node is replaced within seconds', async (t) => {
  const topic = `keel-${++topics}`;
  const a = await active(await node(t, 'a', topic));
  const b = await node(t, 'b', topic);
  const c = await node(t, 'c', topic);
  const { json: status } = await admin(c, 'GET', '/cluster');
  t.equal(status.role, 'standby', 'c stands by');
  t.equal(status.active_node, 'a', 'c knows a is active');
  // Registered through a standby: forwarded to a, and followed by b and c through the metadata log.
  await register(b, endpoint);
  const first = await ingress(c, '/Steps/run', { id: 'via-c' });
  t.same([first.status, first.body], [200, 'done via-c'], 'a call to a standby is answered by the active node');
  // Flow control: a rule set through a standby is committed by the active node and on each of its partitions' logs.
  const rule = await admin(c, 'PUT', '/limits/rules', [{ pattern: 'cl', limits: { concurrency: 2 } }]);
  t.equal(rule.status, 200, `a rule set through a standby (${rule.text})`);
  const ruleVersion = rule.json?.[0]?.version;
  const versionsOn = async (keel) => (await admin(keel, 'GET', '/partitions')).json.partitions.map((p) => p.limit_rules_version);
  t.ok((await versionsOn(a)).every((v) => v === ruleVersion), `every partition of the active node has rule book v${ruleVersion}`);
  // SQL on a standby's 9071: the active node answers for the cluster, errors keep their SQLSTATE.
  const pgOf = async (keel) => {
    const client = new pg.Client({ host: keel.pgsql.host, port: keel.pgsql.port, user: 'keel', database: 'keel' });
    client.on('error', () => {}); // its node is SIGKILLed below
    await client.connect();
    t.teardown(() => client.end().catch(() => {}));
    return client;
  };
  const [pgA, pgC] = [await pgOf(a), await pgOf(c)];
  const sql = 'SELECT target_service_name AS service, status FROM sys_invocation WHERE target_service_name = $1';
  await eventually(async () => (await pgC.query(sql, ['Steps'])).rows.length === 1);
  t.same((await pgC.query(sql, ['Steps'])).rows, [{ service: 'Steps', status: 'completed' }], "psql on a standby sees the active node's invocations");
  const wrong = async (client) => client.query('SELECT nope FROM sys_invocation').then(() => undefined, (err) => [err.code, err.message]);
  const [wrongA, wrongC] = [await wrong(pgA), await wrong(pgC)];
  t.ok(wrongC !== undefined, `a bad query on the standby is an error: ${wrongC}`);
  t.same(wrongC, wrongA, 'with the SQLSTATE and message the active node gives');
  // A query the standby forwards, cancelled by its client (psql's Ctrl-C: a CancelRequest to the standby's 9071):
  // the client is told it cancelled (KEEL0024), not that the active node is unreachable, and the session goes on.
  const heavy = pgC.query('SELECT sum(hash(range)) FROM range(10000000000000)').catch((err) => err);
  await new Promise((r) => setTimeout(r, 1_500));
  const cancelled = Date.now();
  await new Promise((resolve, reject) => {
    const cancel = Buffer.alloc(16);
    [16, 80877102, pgC.processID, pgC.secretKey].forEach((v, i) => cancel.writeInt32BE(v, 4 * i));
    const s = net.connect(c.pgsql.port, c.pgsql.host, () => s.end(cancel));
    s.on('close', resolve).on('error', reject);
  });
  const heavyEnded = await heavy;
  t.same([heavyEnded.code, /KEEL0024.*cancelled by its client/.test(heavyEnded.message)], ['57014', true], `a cancelled query on the standby: ${heavyEnded.message}`);
  t.ok(Date.now() - cancelled < 10_000, `ended by the cancel (${Date.now() - cancelled} ms after it), not by the 30 s limit`);
  t.same((await pgC.query('SELECT 41 + 1 AS n')).rows, [{ n: 42 }], 'the cancelled session on the standby goes on');
  const scoped = await ingress(c, '/restate/scope/cl/call/Steps/run', { id: 'scoped' }, { 'x-restate-limit-key': 't1' });
  t.same([scoped.status, scoped.body], [200, 'done scoped'], 'a scoped call through a standby');
  // Over HTTP/2 (h2c) to the standby, forwarded over HTTP/1.1: the pseudo-header fields stay behind.
  const h2 = await new Promise((resolve, reject) => {
    const session = http2.connect(c.ingress);
    session.on('error', reject);
    setTimeout(() => reject(new Error('no answer over h2c in 15 s')), 15_000).unref();
    const stream = session.request({ ':method': 'POST', ':path': '/Steps/run', 'content-type': 'application/json' });
    stream.on('error', reject);
    let body = '';
    let status;
    stream.on('response', (h) => (status = h[':status']));
    stream.on('data', (d) => (body += d));
    stream.on('end', () => {
      session.close();
      resolve({ status, body });
    });
    stream.end(JSON.stringify({ id: 'via-c-h2' }));
  });
  t.same([h2.status, JSON.parse(h2.body)], [200, 'done via-c-h2'], 'a call over h2c to a standby is answered by the active node');
  const { json: view } = await admin(a, 'GET', '/cluster');
  t.same(view.partitions.map((p) => p.leader_epoch), [1, 1, 1, 1], 'a leads the four partitions in epoch 1');
  t.ok(view.partitions.every((p) => Number.isSafeInteger(p.applied_position)) && view.partitions.some((p) => p.applied_position >= 1), `with their log positions (${view.partitions.map((p) => p.applied_position)})`);
  const scrape = async (keel) => (await fetch(`${keel.admin}/metrics`)).text();
  t.match(await scrape(a), /^keel_cluster_node_active 1$/m, "a's /metrics: active");
  t.match(await scrape(a), /^keel_partition_leader_epoch\{partition="3"\} 1$/m, 'and the epoch of each partition');
  t.match(await scrape(c), /^keel_cluster_node_active 0$/m, "c's /metrics (answered by c itself): standing by");
  t.match(await scrape(c), /^keel_cluster_members 3$/m, 'in a cluster of three');
  const positions = async (keel) => (await admin(keel, 'GET', '/cluster')).json.partitions.map((p) => p.applied_position);
  await eventually(async () => {
    const [x, y] = [await positions(c), await positions(a)];
    if (JSON.stringify(x) !== JSON.stringify(y)) throw new Error(`c applied ${x}, a ${y}`);
    return true;
  });
  t.pass(`c follows the partition logs while it stands by: its store applied what a appended (${await positions(c)})`);
  for (const keel of [a, c]) {
    const { partitions } = (await admin(keel, 'GET', '/cluster')).json;
    t.ok(partitions.every((p) => p.log_end_offset > 0 && p.applied_offset === p.log_end_offset && p.lag_offsets === 0), `GET /cluster: no lag behind the logs (${partitions.map((p) => `${p.applied_offset}/${p.log_end_offset}`)})`);
  }
  await eventually(async () => /^keel_partition_log_lag_offsets\{partition="3"\} 0$/m.test(await scrape(c)));
  t.pass("and /metrics gives each partition's lag");
  // The UI's cluster page on the standby, in a real browser: the node's own view.
  const browser = await launch(t);
  const { page, problems } = await newPage(browser, t);
  await page.goto(`${c.admin}/ui/cluster`);
  await page.locator('#cluster-partitions tbody tr').nth(3).waitFor();
  t.equal(await page.locator('#cluster-partitions tbody tr').count(), 4, 'the cluster page: one row per partition');
  t.match(await page.locator('#cluster-node').innerText(), /c\s+Role\s+standby/, 'this node, c, stands by');
  t.equal(await page.locator('#leaders').innerText(), 'a leads every partition', 'a is active');
  t.equal(await page.locator('#cluster-members').innerText(), 'a, b, c');
  t.same(problems, [], 'no page errors');
  await browser.close();

  // Load through b and c while a is SIGKILLed: adds with idempotency keys, retried until answered.
  let stop = false;
  const answered = []; // [time, n]
  const load = async (keel, from) => {
    for (let i = from; !stop; i += 2) {
      const res = await call(keel, '/Counter/load/add', 1, { 'idempotency-key': `add-${i}` });
      if (res.status === 200) answered.push([performance.now(), i]);
    }
  };
  const loads = [load(b, 0), load(c, 1)];
  await sleep(1_000);
  const killedAt = performance.now();
  await a.kill('SIGKILL');
  try {
    await eventually(() => answered.some(([at]) => at > killedAt + 500), { timeout_ms: 30_000 });
    await sleep(500);
  } finally {
    stop = true;
    stopCalls = true;
  }
  await Promise.all(loads);
  stopCalls = false;
  let gap = 0;
  for (let i = 1; i < answered.length; i++) if (answered[i][0] > killedAt) gap = Math.max(gap, answered[i][0] - answered[i - 1][0]);
  t.comment(`active node SIGKILLed under load: no call answered for ${gap.toFixed(0)} ms; ${answered.length} adds answered`);
  t.ok(gap < 10_000, `failover in ${gap.toFixed(0)} ms (goal: 10 s)`);
  const survivor = (await admin(b, 'GET', '/cluster')).json.role === 'active' ? b : c;
  await active(survivor);
  const { body: count } = await call(survivor, '/Counter/load/get');
  t.equal(count, answered.length, 'every answered add counted once: none lost, none applied twice');
  const { json: deployments } = await admin(survivor, 'GET', '/deployments');
  t.equal(deployments.deployments?.length, 1, 'the new active node had followed the deployment registered through a standby');
  t.ok((await versionsOn(survivor)).every((v) => v === ruleVersion), 'the new active node folded the rule book from the logs');
  const ruleRows = await query(survivor, "SELECT pattern, concurrency FROM sys_rules WHERE pattern = 'cl'");
  t.same(ruleRows, [{ pattern: 'cl', concurrency: 2 }], 'and followed it in the metadata (sys_rules)');
});

// Twice: with the epochs alone, and with Kafka's transactional producer as a second fence (the
// new leader's producer, of the same transactional.id, fences the paused one's).
for (const transactional of [false, true]) {
  t.test(`an active node paused past its session is deposed: it exits when it resumes, nothing it held is lost (transactional: ${transactional})`, async (t) => {
    const topic = `keel-${++topics}`;
    const env = { KEEL_CLUSTER__TRANSACTIONAL: String(transactional) };
    const a = await active(await node(t, 'a', topic, [], env));
    const b = await node(t, 'b', topic, [], env);
    await register(a, endpoint);
    for (let i = 0; i < 5; i++) t.equal((await call(b, '/Counter/p/add', 1, { 'idempotency-key': `p-${i}` })).status, 200);
    // A call on its way into a as it is paused: whatever a answers, it is applied at most once.
    const inflight = ingress(a, '/Counter/p/add', 100, { 'idempotency-key': 'p-inflight' }).catch((err) => ({ status: 0, body: String(err) }));
    a.proc.kill('SIGSTOP');
    await active(b);
    t.pass('b took over while a was paused');
    for (let i = 5; i < 10; i++) t.equal((await call(b, '/Counter/p/add', 1, { 'idempotency-key': `p-${i}` })).status, 200);
    a.proc.kill('SIGCONT');
    const exited = await Promise.race([a.exited, sleep(20_000).then(() => 'still running')]);
    t.same(exited, { code: 1, signal: null }, 'a exited once it saw it was deposed');
    t.ok(a.logLines('KEEL0802').length > 0, 'and said why (KEEL0802)');
    const late = await inflight;
    t.comment(`the call in flight into a when it was paused: a answered ${late.status} ${JSON.stringify(late.body)}`);
    const before = (await call(b, '/Counter/p/get')).body;
    if (late.status === 200) t.equal(before, 110, 'a acknowledged the call in flight: it is in the state b holds');
    else t.ok(before === 10 || before === 110, `a did not acknowledge it: applied once or not at all (${before})`);
    const retried = await call(b, '/Counter/p/add', 100, { 'idempotency-key': 'p-inflight' });
    t.equal(retried.status, 200, 'the call in flight, retried through b with its idempotency key, is answered');
    t.equal((await call(b, '/Counter/p/get')).body, 110, 'the state holds every add once, the one in flight included');
  });
}

t.test('under load: the broker leading the log partitions is SIGKILLed, then every node is restarted in turn; nothing answered is lost', async (t) => {
  const topic = `keel-${++topics}`;
  const nodes = [await active(await node(t, 'a', topic)), await node(t, 'b', topic), await node(t, 'c', topic)];
  await register(nodes[0], endpoint);
  const load = loadOn(call, 'roll', nodes);
  await sleep(1_000);

  // The broker leading partition 0 of the log (and so, likely, others) dies.
  const leader = (await kafka.leaders(topic))[0];
  let at = performance.now();
  await kafka.kill(leader);
  await sleep(2_000); // the broker's session: the cluster has seen it gone
  await resumed(load, performance.now());
  t.comment(`broker ${leader} SIGKILLed: no add answered for ${longestGap(load.answered, at).toFixed(0)} ms`);
  t.ok(longestGap(load.answered, at) < 10_000, 'the cluster kept answering through the loss of a broker');
  await kafka.start(leader);

  // A rolling restart: each node stopped (SIGTERM: a clean leave) and started again, one at a time.
  const gaps = [];
  for (const keel of nodes) {
    at = performance.now();
    await keel.stop();
    await keel.launch();
    await resumed(load, performance.now());
    gaps.push(longestGap(load.answered, at));
  }
  load.stop = true;
  stopCalls = true;
  await load.done;
  stopCalls = false;
  t.comment(`rolling restart: the longest wait for an answer while each node restarted: ${gaps.map((g) => `${g.toFixed(0)} ms`).join(', ')}; ${load.answered.length} adds answered`);
  t.ok(gaps.every((g) => g < 10_000), 'every restart handed over within 10 s');
  const activeNow = await eventually(async () => {
    for (const keel of nodes) if ((await admin(keel, 'GET', '/cluster')).json?.role === 'active') return keel;
    return undefined;
  });
  t.equal((await call(activeNow, '/Counter/roll/get')).body, load.answered.length, 'every answered add counted once');
  for (const keel of nodes) await keel.kill('SIGKILL');
});

t.test('a Kafka subscription consumed on the active node goes on from its positions on the next one: every record once, in order per key', async (t) => {
  const topic = `keel-${++topics}`;
  const source = `orders-${topics}`;
  await kafka.createTopic(source, 2);
  const file = path.join(tempDir(t), 'keel.toml');
  fs.writeFileSync(file, `[[ingress.kafka_clusters]]\nname = "real"\nbrokers = [${kafka.brokers.map((b) => JSON.stringify(b)).join(', ')}]\n`);
  const a = await active(await node(t, 'a', topic, ['--config', file]));
  const b = await node(t, 'b', topic, ['--config', file]);
  await register(a, endpoint);
  const created = await admin(b, 'POST', '/subscriptions', { source: `kafka://real/${source}`, sink: 'service://Ledger/add', options: { 'auto.offset.reset': 'earliest', 'session.timeout.ms': '6000', 'heartbeat.interval.ms': '300' } });
  t.equal(created.status, 201, `subscription created through the standby (${created.text})`);
  const records = (from, n) => Array.from({ length: n }, (_, j) => ({ key: `k${(from + j) % 5}`, value: JSON.stringify({ i: from + j }) }));
  await kafka.produce(source, records(0, 100));
  await sleep(300); // mid-stream
  await a.kill('SIGKILL');
  await kafka.produce(source, records(100, 100));
  await active(b);
  const items = async (k) => (await call(b, `/Ledger/k${k}/get`)).body;
  await eventually(async () => (await Promise.all([0, 1, 2, 3, 4].map(items))).flat().length >= 200, { timeout_ms: 60_000 });
  await sleep(1000);
  for (let k = 0; k < 5; k++) {
    const expected = Array.from({ length: 200 }, (_, i) => i).filter((i) => i % 5 === k);
    t.same(await items(k), expected, `k${k}: its 40 records once, in offset order, across the failover`);
  }
});

/**
 * Standby `b`, whose first `sends` sends to the cluster log `topic` are refused as a broker refuses a
 * connection (test/helpers/kafka-fault.cjs says why that is injected); every one by default.
 */
function refusedStandby(t, topic, sends = Number.MAX_SAFE_INTEGER, env = {}) {
  const fault = fileURLToPath(new URL('./helpers/kafka-fault.cjs', import.meta.url));
  return node(t, 'b', topic, [], { ...env, NODE_OPTIONS: `--require ${fault}`, KAFKA_FAULT_TOPIC: topic, KAFKA_FAULT_SENDS: String(sends) });
}

/** Waits until `keel` follows every partition (it can take the lead from there). */
const following = (keel) => eventually(async () => (await admin(keel, 'GET', '/cluster')).json?.partitions?.every((p) => Number.isSafeInteger(p.applied_position)), { timeout_ms: 30_000 });

const takeoverRetries = (keel) => keel.logLines('KEEL0801').filter((l) => /taking over partitions failed/.test(l.msg));

/** A standby whose sends to the log are all refused, once the active node beside it is SIGKILLed (it follows every partition first). */
async function refusedStandbyAlone(t, env = {}) {
  const topic = `keel-${++topics}`;
  const a = await active(await node(t, 'a', topic));
  const b = await refusedStandby(t, topic, undefined, env);
  await following(b);
  await a.kill('SIGKILL');
  return b;
}

t.test('a takeover the cluster log refuses for a moment is tried again: the standby becomes active rather than exit', async (t) => {
  const topic = `keel-${++topics}`;
  const a = await active(await node(t, 'a', topic));
  // b's first two sends to the log (announcements: one per partition, the four at once) are
  // refused: two partitions open, two are taken over again a second later.
  const b = await refusedStandby(t, topic, 2);
  await register(a, endpoint);
  const before = await call(a, '/Counter/k/add', 5);
  t.same([before.status, before.body], [200, 5], 'a counts to 5');
  await following(b);
  await a.kill('SIGKILL');
  await active(b);
  t.equal(b.proc.exitCode, null, 'b runs on');
  const retried = takeoverRetries(b);
  t.ok(retried.length >= 1, `b logged the refused takeover and tried again (${retried.map((l) => `partitions ${l.partitions}, failing for ${l.failing_ms} ms`).join('; ')})`);
  t.equal(retried[0].partitions.length, 2, 'for the two partitions whose announcement was refused');
  t.same((await admin(b, 'GET', '/cluster')).json.partitions.map((p) => p.leader), ['b', 'b', 'b', 'b'], 'b leads all four now');
  t.match(retried[0], { level: 40, err: { message: /KEEL0801|cluster log cannot be reached|ECONNREFUSED/ } }, 'a warning naming the refusal');
  t.same(b.logLines('KEEL0802').filter((l) => l.level === 60), [], 'and no fatal line');
  const after = await call(b, '/Counter/k/add', 1);
  t.same([after.status, after.body], [200, 6], "b goes on from a's state: 6");
});

t.test('a takeover the cluster log goes on refusing is given up after a minute: the standby says so (KEEL0802) and exits 1', async (t) => {
  const b = await refusedStandbyAlone(t);
  const killed = performance.now();
  const exit = await Promise.race([b.exited, sleep(120_000).then(() => 'running')]);
  const took_s = (performance.now() - killed) / 1000;
  t.same(exit, { code: 1, signal: null }, `b exits with status 1 (${took_s.toFixed(1)} s after a's SIGKILL)`);
  // 2 s of session before b is chosen, then a minute of tries a second apart.
  t.ok(took_s >= 60 && took_s < 90, `after about a minute of tries (${took_s.toFixed(1)} s)`);
  const retried = takeoverRetries(b);
  t.ok(retried.length >= 30, `tried again about every second meanwhile (${retried.length} KEEL0801 warnings)`);
  t.ok(retried.every((l) => l.partitions.length === 4 && l.level === 40), 'each naming the four partitions it could not take, as a warning');
  const failing = retried.map((l) => l.failing_ms);
  t.ok(failing.every((ms, i) => i === 0 || ms > failing[i - 1]) && failing.at(-1) >= 55_000 && failing.at(-1) < 60_000, `counting how long the log has refused (${failing[0]} ms … ${failing.at(-1)} ms)`);
  const fatal = b.logLines('KEEL0802').filter((l) => l.level === 60);
  t.equal(fatal.length, 1, 'then one fatal line');
  t.match(fatal[0]?.msg, /taking the lead failed/, 'saying that taking the lead failed');
  t.notOk((await admin(b, 'GET', '/cluster').catch(() => undefined))?.json, 'and nothing answers for it');
});

// The SIGTERM comes while a try is under way: its send to the log is held (as kafkajs's retries
// hold it) when the stop closes the Kafka clients, which fails it as kafkajs fails a send on a
// producer disconnecting (not a passing error). A stopping node keeps what opened and is not deposed.
t.test('a standby stopped (SIGTERM) while it takes the lead, its send to the log held: status 0, no fatal line', async (t) => {
  const b = await refusedStandbyAlone(t, { KAFKA_FAULT_DELAY_MS: '60000' });
  await eventually(() => b.output.includes('held 60000 ms first'), { timeout_ms: 30_000 });
  const asked = performance.now();
  b.proc.kill('SIGTERM');
  const exit = await Promise.race([b.exited, sleep(30_000).then(() => 'running')]);
  const took_s = (performance.now() - asked) / 1000;
  t.same(exit, { code: 0, signal: null }, `b exits with status 0 (${took_s.toFixed(1)} s after the SIGTERM)`);
  t.ok(took_s < 15, 'promptly');
  t.ok(b.output.includes('failed: its producer is disconnecting'), 'the held send failed as the stop closed its producer');
  t.same(b.logLines('KEEL0802'), [], 'not deposed: no KEEL0802');
  const fatal = jsonLines(b.output).filter((l) => l.level >= 60);
  t.same(fatal, [], 'no fatal line');
});

/** Starts a node that must refuse to start; what it wrote, its fatal lines and how long it took. */
async function refusedStart(t, env, { dir } = {}) {
  const started = performance.now();
  const err = await startKeel(t, { ...(dir !== undefined ? { dir } : {}), env: { KEEL_WORKER__PARTITIONS: '4', KEEL_CLUSTER__SESSION_TIMEOUT: '2s', ...env } }).then(
    () => undefined,
    (e) => e,
  );
  const took_s = (performance.now() - started) / 1000;
  t.ok(err, `the node refused to start (${took_s.toFixed(1)} s)`);
  const output = err?.message ?? '';
  t.match(output, /exited early \(\{"code":1,"signal":null\}\)/, 'with status 1');
  return { output, took_s, fatal: jsonLines(output).filter((l) => l.level === 60) };
}

// Before, both of these left the start as an unhandled rejection: kafkajs's bare stack trace on
// stderr, and no log line at all.
t.test("a node that cannot reach its brokers at start says so (KEEL0801, naming them and the cause) and exits 1", async (t) => {
  const closed = `127.0.0.1:${await freePort()}`;
  const { output, took_s, fatal } = await refusedStart(t, { KEEL_CLUSTER__BROKERS: closed, KEEL_CLUSTER__NODE_NAME: 'lonely', KEEL_CLUSTER__LOG_TOPIC: `t${++topics}` });
  t.ok(took_s >= 5 && took_s < 19, `after kafkajs's retries (${took_s.toFixed(1)} s)`);
  t.equal(fatal.length, 1, 'one fatal line');
  t.equal(fatal[0]?.code, 'KEEL0801');
  t.match(fatal[0]?.msg, new RegExp(`cannot read the cluster metadata \\(topic t${topics}-meta\\) on the Kafka brokers ${closed.replace(/\./g, '\\.')} \\(cluster\\.brokers\\): Connection error: connect ECONNREFUSED`), 'naming what it tried, the brokers and the refused connection');
  t.notMatch(output, /triggerUncaughtException|KafkaJSNonRetriableError/, 'no unhandled rejection');
});

t.test("a node whose worker.partitions differs from the running nodes' or exceeds the log topic's partitions refuses to start (RT0002, naming both counts)", async (t) => {
  const topic = `t${++topics}`;
  const first = await node(t, 'four', topic);
  t.teardown(() => first.stop());
  await active(first);
  const expected = {
    8: `worker.partitions is 8, but the cluster's log topic ${topic} has 4 partitions`,
    2: `worker.partitions is 2 here but 4 on node 'four' (ingress ${first.ingress})`,
  };
  for (const partitions of ['8', '2']) {
    const { fatal, output } = await refusedStart(t, { KEEL_CLUSTER__BROKERS: kafka.brokers.join(','), KEEL_CLUSTER__NODE_NAME: `n${partitions}`, KEEL_CLUSTER__LOG_TOPIC: topic, KEEL_WORKER__PARTITIONS: partitions });
    t.equal(fatal.length, 1, `${partitions} partitions: one fatal line`);
    t.equal(fatal[0]?.code, 'RT0002');
    t.match(fatal[0]?.msg, expected[partitions], 'naming both counts');
    t.notMatch(output, /triggerUncaughtException/, 'no unhandled rejection');
  }
  // Before, the node of 2 joined beside the node of 4: the 4-partition node shared out partitions 2
  // and 3 to it, which it did not have, and it mapped keys to 2 partitions.
  const view = (await admin(first, 'GET', '/cluster')).json;
  t.same(view.members, ['four'], 'the node already there is alone in the group');
  t.ok(view.partitions.every((p) => p.leader === 'four'), 'and leads all four partitions');
});

t.test("a node started under the name of a running node refuses to start (RT0002) after a session's wait; the running one goes on alone", async (t) => {
  const topic = `t${++topics}`;
  const first = await node(t, 'twin', topic);
  t.teardown(() => first.stop());
  await active(first);
  await register(first, endpoint);
  const { fatal, output, took_s } = await refusedStart(t, { KEEL_CLUSTER__BROKERS: kafka.brokers.join(','), KEEL_CLUSTER__NODE_NAME: 'twin', KEEL_CLUSTER__LOG_TOPIC: topic, KEEL_CLUSTER__SPREAD_PARTITIONS: 'false' });
  t.ok(took_s >= 5 && took_s < 19, `after the 2 s session and the grace (${took_s.toFixed(1)} s)`);
  t.equal(fatal.length, 1, 'one fatal line');
  t.equal(fatal[0]?.code, 'RT0002');
  t.match(fatal[0]?.msg, `cluster.node_name 'twin' is taken: another node of the cluster runs under it (ingress ${first.ingress}`, "naming the name and the other node's addresses");
  t.ok(jsonLines(output).some((l) => l.level === 40 && l.code === 'RT0002' && /waiting for it to leave/.test(l.msg)), 'it said first that it waits');
  // Before, both joined: each took the other's partitions for unled ones, and calls on them got
  // no answer for the leader wait.
  const view = (await admin(first, 'GET', '/cluster')).json;
  t.same(view.members, ['twin'], 'the running node is alone in the group');
  t.equal(view.role, 'active', 'and still active');
  t.equal((await call(first, '/Counter/twin/add', 1)).status, 200, 'and answers');
});

t.test('two nodes started under one name at once: the later refuses (RT0002) once both are in the group, the other goes on alone', async (t) => {
  const topic = `t${++topics}`;
  // Both pass the start's check of the group: neither is in it yet.
  const starts = await Promise.allSettled([node(t, 'gemini', topic), node(t, 'gemini', topic)]);
  const ready = starts.filter((s) => s.status === 'fulfilled').map((s) => s.value);
  const exitedEarly = starts.filter((s) => s.status === 'rejected').map((s) => s.reason.message);
  const watched = ready.map((k) => Promise.race([k.exited.then((e) => ({ k, e })), sleep(15_000).then(() => undefined)]));
  const exitedLater = (await Promise.all(watched)).filter((x) => x !== undefined);
  t.equal(exitedEarly.length + exitedLater.length, 1, `exactly one of the two stopped (${exitedEarly.length} before it was ready, ${exitedLater.length} after)`);
  const outputOf = exitedEarly[0] ?? exitedLater[0]?.k.output ?? '';
  if (exitedLater[0] !== undefined) t.same(exitedLater[0].e, { code: 1, signal: null }, 'with status 1');
  const fatal = jsonLines(outputOf).filter((l) => l.level === 60);
  t.equal(fatal[0]?.code, 'RT0002', 'RT0002');
  t.match(fatal[0]?.msg, /cluster\.node_name 'gemini' is taken: another node of the cluster (started under it first|runs under it) \(ingress http:/, `naming the name and the other node (${/started under it first/.test(fatal[0]?.msg) ? 'told apart in the group' : 'seen by the check before joining'})`);
  const alone = ready.find((k) => !exitedLater.some((x) => x.k === k));
  t.ok(alone, 'one goes on');
  if (alone === undefined) return;
  await active(alone);
  await eventually(async () => (await admin(alone, 'GET', '/cluster')).json.members.length === 1, { timeout_ms: 15_000 });
  t.same((await admin(alone, 'GET', '/cluster')).json.members, ['gemini'], 'alone in the group');
  await register(alone, endpoint);
  t.equal((await call(alone, '/Counter/gemini/add', 1)).status, 200, 'and answers');
});

t.test('a node whose cluster.spread_partitions differs from the running nodes\' refuses to start (RT0002, naming the other node)', async (t) => {
  const topic = `t${++topics}`;
  const first = await node(t, 'whole', topic);
  t.teardown(() => first.stop());
  await active(first);
  const { fatal } = await refusedStart(t, { KEEL_CLUSTER__BROKERS: kafka.brokers.join(','), KEEL_CLUSTER__NODE_NAME: 'spreader', KEEL_CLUSTER__LOG_TOPIC: topic, KEEL_CLUSTER__SPREAD_PARTITIONS: 'true' });
  t.equal(fatal.length, 1, 'one fatal line');
  t.equal(fatal[0]?.code, 'RT0002');
  t.match(fatal[0]?.msg, `cluster.spread_partitions is true here but false on node 'whole' (ingress ${first.ingress})`, 'naming both settings and the other node');
  // Before, it joined: with a spreading node leading the group, the partitions it gave the other
  // were refused there with KEEL0803 for good.
  t.same((await admin(first, 'GET', '/cluster')).json.members, ['whole'], 'the running node is alone in the group');
});

t.test("a node SIGKILLed and started again at once with another cluster.spread_partitions is not refused for its own earlier run's setting", async (t) => {
  const topic = `t${++topics}`;
  // Mutated below: each launch of the node reads it again.
  const env = {
    KEEL_CLUSTER__BROKERS: kafka.brokers.join(','),
    KEEL_CLUSTER__NODE_NAME: 'changer',
    KEEL_CLUSTER__LOG_TOPIC: topic,
    KEEL_CLUSTER__SESSION_TIMEOUT: '2s',
    KEEL_CLUSTER__SPREAD_PARTITIONS: 'false',
    KEEL_WORKER__PARTITIONS: '4',
  };
  const k = await active(await startKeel(t, { env }));
  await register(k, endpoint);
  t.equal((await call(k, '/Counter/changer/add', 1)).status, 200);
  env.KEEL_CLUSTER__SPREAD_PARTITIONS = 'true';
  const from = k.output.length;
  // Its killed run is still a member of the group (for a session), telling spread_partitions false.
  await k.restart();
  const since = () => jsonLines(k.output.slice(from));
  t.same(since().filter((l) => l.code === 'RT0002'), [], 'no RT0002: the member under its name at its addresses is its own killed run');
  await eventually(async () => (await admin(k, 'GET', '/cluster')).json?.members?.length === 1, { timeout_ms: 15_000 });
  t.same((await admin(k, 'GET', '/cluster')).json.members, ['changer'], 'alone in the group once the killed run left it');
  const added = await call(k, '/Counter/changer/add', 1);
  t.same([added.status, added.body], [200, 2], 'and it goes on from its store');
});

t.test("a cluster node started on a store a single node wrote refuses to start (RT0002, naming the store) before it joins", async (t) => {
  const dir = tempDir(t);
  const single = await startKeel(t, { dir, env: { KEEL_WORKER__PARTITIONS: '4' } });
  await register(single, endpoint);
  for (let i = 0; i < 4; i++) t.equal((await ingress(single, `/Counter/single-${i}/add`, 1)).status, 200);
  await single.stop();
  const topic = `t${++topics}`;
  const { fatal, output } = await refusedStart(t, { KEEL_CLUSTER__BROKERS: kafka.brokers.join(','), KEEL_CLUSTER__NODE_NAME: 'was-single', KEEL_CLUSTER__LOG_TOPIC: topic }, { dir });
  t.equal(fatal.length, 1, 'one fatal line');
  t.equal(fatal[0]?.code, 'RT0002', 'RT0002 (it was KEEL0802, "taking the lead failed", once chosen to lead)');
  t.match(fatal[0]?.msg, `the worker store ${path.join(dir, 'data', 'worker')} was written by a single node`, 'naming the store');
  t.notMatch(output, /this node leads|standing by/, 'it never joined the group');
});

t.test('a node refuses a store that copies another log (RT0002): another topic, or its own topic made again', async (t) => {
  const copied = async (topic) => {
    const dir = tempDir(t);
    const k = await active(await node(t, 'copier', topic, [], {}, dir));
    await register(k, endpoint);
    for (let i = 0; i < 4; i++) t.equal((await call(k, `/Counter/copied-${i}/add`, 1)).status, 200);
    await k.stop();
    return dir;
  };
  const env = (topic) => ({ KEEL_CLUSTER__BROKERS: kafka.brokers.join(','), KEEL_CLUSTER__NODE_NAME: 'copier', KEEL_CLUSTER__LOG_TOPIC: topic, KEEL_CLUSTER__SPREAD_PARTITIONS: 'false' });
  const store = (dir) => path.join(dir, 'data', 'worker');

  const first = `t${++topics}`;
  const dir = await copied(first);
  const other = `t${++topics}`;
  const renamed = await refusedStart(t, env(other), { dir });
  t.equal(renamed.fatal[0]?.code, 'RT0002', 'another topic: RT0002');
  t.match(renamed.fatal[0]?.msg, new RegExp(`the worker store ${store(dir).replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} is a copy of topic ${first} on Kafka cluster \\S+, and this node is set to topic ${other} on Kafka cluster`), 'naming both topics');

  // The file that names the log torn (a disk that lost its last write): the store is not taken
  // for a copy of whatever log the node is set to.
  const named = path.join(store(dir), 'cluster-log');
  fs.writeFileSync(named, fs.readFileSync(named, 'utf8').slice(0, 20));
  const torn = await refusedStart(t, env(first), { dir });
  t.equal(torn.fatal[0]?.code, 'KEEL0015', 'cluster-log torn: KEEL0015');
  t.match(torn.fatal[0]?.msg, `${named} does not say which log the store copies`, 'naming the file');

  // The topic deleted and made again (as when the brokers lose their data): the store read further than it goes.
  const again = `t${++topics}`;
  const dir2 = await copied(again);
  const { Kafka, logLevel } = (await import('kafkajs')).default;
  const kadmin = new Kafka({ brokers: kafka.brokers, logLevel: logLevel.NOTHING }).admin();
  await kadmin.connect();
  await kadmin.deleteTopics({ topics: [again, `${again}-meta`] });
  await kadmin.disconnect();
  await sleep(2_000); // the brokers finish the deletion before the node makes the topics again
  const remade = await refusedStart(t, env(again), { dir: dir2 });
  t.equal(remade.fatal[0]?.code, 'RT0002', 'its own topic made again: RT0002');
  t.match(remade.fatal[0]?.msg, new RegExp(`has read partition \\d+ of topic ${again} to offset \\d+, but the topic ends at offset 0: it is not the log this store copied`), 'naming the partition, the offsets and the topic');
  t.notMatch(renamed.output + torn.output + remade.output, /this node leads|standing by|KEEL0802/, 'none joined the group nor got as far as leading');
});
