// A Keel cluster whose partitions are spread over its nodes (cluster.spread_partitions), on a
// real Apache Kafka cluster (3 brokers, KRaft, on loopback, started once for the file): each
// node leads a share of the partitions and follows the others; a request for a partition led
// elsewhere goes to its leader; calls between partitions on different nodes go through the
// leader's admin API, exactly once. A SIGKILLed node's partitions go to the others.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKafkaCluster } from './helpers/kafka-cluster.mjs';
import { counter, stepRuns, steps } from './services/cluster-services.mjs';
import { startKeel, serveServices, register, ingress, eventually, query, adminCall as admin } from './helpers/keel.mjs';

const kafka = await startKafkaCluster(t, { brokers: 3 });
let topics = 0;
const PARTITIONS = 6;

/** Adds 1 to each counter named, through calls and one-way sends from a handler: calls between partitions. */
const relay = restate.service({
  name: 'Relay',
  handlers: {
    spread: async (ctx, { keys, sends }) => {
      const counts = [];
      for (const key of keys) counts.push(await ctx.objectClient(counter, key).add(1));
      for (const key of sends) ctx.objectSendClient(counter, key).add(1);
      return counts;
    },
  },
});
/** The awakeable each Waiter call waits on, by the id the caller gave it. */
const awakeables = new Map();
const waiter = restate.service({
  name: 'Waiter',
  handlers: {
    wait: async (ctx, { id }) => {
      const { id: awakeable, promise } = ctx.awakeable();
      await ctx.run('publish', () => void awakeables.set(id, awakeable));
      return `woken with ${await promise}`;
    },
  },
});
const flow = restate.workflow({
  name: 'Flow',
  handlers: {
    run: async (ctx, { tag }) => `${tag}:${await ctx.promise('go').get()}`,
    approve: async (ctx, value) => void (await ctx.promise('go').resolve(value)),
  },
});
/** Each Slow call's step runs, by key: a call whose partition moves mid-way resumes on the next leader. */
const slowRuns = new Map();
const slow = restate.object({
  name: 'Slow',
  handlers: {
    run: async (ctx) => {
      await ctx.run('count', () => void slowRuns.set(ctx.key, (slowRuns.get(ctx.key) ?? 0) + 1));
      await ctx.sleep(3_000);
      return `slept ${ctx.key}`;
    },
  },
});
const endpoint = await serveServices(t, [steps, counter, relay, waiter, flow, slow]);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function node(t, name, topic) {
  return startKeel(t, {
    env: {
      KEEL_CLUSTER__BROKERS: kafka.brokers.join(','),
      KEEL_CLUSTER__NODE_NAME: name,
      KEEL_CLUSTER__LOG_TOPIC: topic,
      KEEL_CLUSTER__SESSION_TIMEOUT: '2s',
      KEEL_CLUSTER__SPREAD_PARTITIONS: 'true',
      KEEL_WORKER__PARTITIONS: String(PARTITIONS),
    },
  });
}

/** Each partition's leader as `keel` sees it. */
async function leaders(keel) {
  const { json } = await admin(keel, 'GET', '/cluster');
  return (json?.partitions ?? []).map((p) => p.leader);
}

/** Waits until every node agrees that each of `names` leads a share and every partition has a leader. */
async function spreadOver(nodes, names) {
  await eventually(async () => {
    const views = await Promise.all(nodes.map(leaders));
    const first = JSON.stringify(views[0]);
    return views.every((v) => JSON.stringify(v) === first) && views[0].length === PARTITIONS && views[0].every((l) => names.includes(l)) && names.every((n) => views[0].includes(n));
  }, { timeout_ms: 40_000, interval_ms: 200 });
  return leaders(nodes[0]);
}

/** POSTs until an answer other than 503 or a broken connection comes (a failover answers so meanwhile). */
async function call(keel, pathname, body, headers = {}) {
  for (let tries = 0; ; tries++) {
    const res = await ingress(keel, pathname, body, headers).catch((err) => ({ status: 0, body: String(err) }));
    if ((res.status !== 503 && res.status !== 0) || tries > 400) return res;
    await sleep(50);
  }
}

t.test('three nodes each lead a share of the partitions; every request works through every node', async (t) => {
  const topic = `keel-spread-${++topics}`;
  const nodes = [await node(t, 'a', topic), await node(t, 'b', topic), await node(t, 'c', topic)];
  const [a, b, c] = nodes;
  const led = await spreadOver(nodes, ['a', 'b', 'c']);
  t.comment(`leaders by partition: ${led.join(' ')}`);
  for (const name of ['a', 'b', 'c']) t.equal(led.filter((l) => l === name).length, PARTITIONS / 3, `${name} leads ${PARTITIONS / 3} partitions`);
  t.equal((await admin(a, 'GET', '/cluster')).json.role, 'leading', 'a leads some partitions, not all');

  await register(b, endpoint);
  await eventually(async () => (await Promise.all(nodes.map(async (k) => (await admin(k, 'GET', '/deployments')).json?.deployments?.length))).every((n) => n === 1));
  t.pass('a deployment registered through b is known to every node');

  // Objects: 24 keys land on every partition; each key's adds go through every node in turn.
  const keys = Array.from({ length: 24 }, (_, i) => `k${i}`);
  for (let round = 1; round <= 3; round++) {
    const answers = await Promise.all(keys.map((key, i) => call(nodes[(i + round) % 3], `/Counter/${key}/add`, 1)));
    t.same(answers.map((r) => [r.status, r.body]), keys.map(() => [200, round]), `round ${round}: every key's add answered with its count, whichever node was asked`);
  }
  for (const keel of nodes) {
    const gets = await Promise.all(keys.map((key) => call(keel, `/Counter/${key}/get`)));
    t.same(gets.map((r) => r.body), keys.map(() => 3), `every count read through ${keel === a ? 'a' : keel === b ? 'b' : 'c'}`);
  }

  // SQL on any node answers for the whole cluster: its copies of the partitions it follows.
  for (const [name, keel] of [['a', a], ['b', b], ['c', c]]) {
    const rows = await eventually(async () => {
      const r = await query(keel, "SELECT count(*) AS n, count(DISTINCT target_service_key) AS objects FROM sys_invocation WHERE target_service_name = 'Counter' AND target_handler_name = 'add' AND status = 'completed'");
      return r[0]?.n === 72 ? r : undefined;
    });
    t.same(rows, [{ n: 72, objects: 24 }], `sys_invocation on ${name}: the 72 adds on every partition`);
    const state = await query(keel, "SELECT count(*) AS n FROM state WHERE service_name = 'Counter' AND key = 'count'");
    t.same(state, [{ n: 24 }], `state on ${name}: 24 objects`);
  }

  // Plain services start on the node asked; their steps run once.
  const runs = await Promise.all(Array.from({ length: 30 }, (_, i) => call(nodes[i % 3], '/Steps/run', { id: `s-${i}` })));
  t.same(runs.map((r) => r.status), Array(30).fill(200), 'thirty calls to a plain service answered');
  t.same(Array.from({ length: 30 }, (_, i) => stepRuns.get(`s-${i}`)), Array(30).fill(1), 'each step ran once');

  // Calls and one-way sends between partitions on different nodes (the outbox over the admin API).
  const relayed = await Promise.all(nodes.map((keel, i) => call(keel, '/Relay/spread', { keys: keys.slice(i * 8, i * 8 + 8), sends: [] })));
  t.same(relayed.map((r) => [r.status, r.body]), [0, 1, 2].map(() => [200, Array(8).fill(4)]), 'three handlers calling 8 objects each: each call answered, with its own add');
  const sent = await Promise.all(nodes.map((keel) => call(keel, '/Relay/spread', { keys: [], sends: keys })));
  t.same(sent.map((r) => r.status), [200, 200, 200], 'three handlers sending to the 24 objects');
  await eventually(async () => (await Promise.all(keys.map((key) => call(c, `/Counter/${key}/get`)))).every((r) => r.body === 7), { timeout_ms: 20_000 });
  t.pass('every send arrived exactly once: each count is 3 + 1 call + 3 sends');

  // Idempotent calls: one invocation whichever node is asked.
  const idem = await Promise.all(nodes.map((keel) => call(keel, '/Counter/idem/add', 5, { 'idempotency-key': 'once' })));
  t.same(idem.map((r) => r.body), [5, 5, 5], 'an idempotent call through three nodes runs once');

  // A workflow and an awakeable, started through one node and completed through the others.
  t.equal((await call(a, '/Flow/f1/run/send', { tag: 'f1' })).status, 202);
  const waiting = await call(b, '/Waiter/wait/send', { id: 'w1' });
  t.equal(waiting.status, 202);
  await eventually(() => awakeables.has('w1'));
  t.equal((await call(c, '/Flow/f1/approve', 'yes')).status, 200, "the workflow's promise resolved through c");
  const output = await eventually(async () => {
    const r = await fetch(`${b.ingress}/restate/workflow/Flow/f1/output`);
    return r.status === 200 ? r.json() : undefined;
  });
  t.equal(output, 'f1:yes', 'its output read through b');
  t.equal((await call(a, `/restate/awakeables/${awakeables.get('w1')}/resolve`, 42)).status, 202, 'the awakeable resolved through a');
  const woken = await eventually(async () => {
    const r = await fetch(`${c.ingress}/restate/invocation/${waiting.body.invocationId}/output`);
    return r.status === 200 ? r.json() : undefined;
  });
  t.equal(woken, 'woken with 42', 'the call waiting on it completed; its output read through c');

  // The admin API: an invocation of a plain service starts on the node asked; cancelled through the next.
  const started = await Promise.all(nodes.map((keel, i) => call(keel, '/Waiter/wait/send', { id: `x${i}` })));
  await eventually(() => [0, 1, 2].every((i) => awakeables.has(`x${i}`)));
  const cancels = await Promise.all(started.map((s, i) => admin(nodes[(i + 1) % 3], 'PATCH', `/invocations/${s.body.invocationId}/cancel`)));
  t.ok(cancels.every((r) => r.status >= 200 && r.status < 300), `each cancelled through a node that does not lead it (${cancels.map((r) => r.status).join(', ')})`);
  const outcomes = await Promise.all(started.map((s, i) => eventually(async () => {
    const r = await fetch(`${nodes[(i + 2) % 3].ingress}/restate/invocation/${s.body.invocationId}/output`);
    return r.status >= 400 && r.status !== 470 ? r.status : undefined; // 470: not completed yet
  })));
  t.ok(outcomes.every((s) => s > 0), `and each output, read through the third node, says it failed (${outcomes.join(', ')})`);
});

t.test('a SIGKILLed node: its partitions go to the others within seconds; nothing acknowledged is lost or done twice', async (t) => {
  const topic = `keel-spread-${++topics}`;
  const nodes = [await node(t, 'a', topic), await node(t, 'b', topic), await node(t, 'c', topic)];
  const [a, b, c] = nodes;
  await spreadOver(nodes, ['a', 'b', 'c']);
  await register(a, endpoint);
  await eventually(async () => (await Promise.all(nodes.map(async (k) => (await admin(k, 'GET', '/deployments')).json?.deployments?.length))).every((n) => n === 1));
  const keys = Array.from({ length: 12 }, (_, i) => `f${i}`);
  // Load through b and c while a is killed: each add idempotent, retried until answered.
  let stop = false;
  const acknowledged = new Map(keys.map((k) => [k, 0]));
  const load = Promise.all(keys.map(async (key, i) => {
    for (let n = 0; !stop; n++) {
      const res = await call([b, c][(i + n) % 2], `/Counter/${key}/add`, 1, { 'idempotency-key': `${key}-${n}` });
      if (res.status !== 200) throw new Error(`add ${key}-${n}: ${res.status} ${JSON.stringify(res.body)}`);
      acknowledged.set(key, n + 1);
    }
  }));
  await sleep(1_000);
  const killedAt = Date.now();
  await a.kill('SIGKILL');
  const survivors = await spreadOver([b, c], ['b', 'c']);
  const failover_ms = Date.now() - killedAt;
  t.ok(failover_ms < 10_000, `a's partitions led by b and c ${failover_ms} ms after the SIGKILL`);
  t.comment(`leaders after: ${survivors.join(' ')}`);
  await sleep(1_000);
  stop = true;
  await load;
  const counts = await Promise.all(keys.map((key) => call(b, `/Counter/${key}/get`)));
  t.same(counts.map((r) => r.body), keys.map((k) => acknowledged.get(k)), 'each count is the number of adds acknowledged: none lost, none twice');
});

t.test('a node joins: partitions move to it while calls wait on them; each call is answered once, from the new leader', async (t) => {
  const topic = `keel-spread-${++topics}`;
  const [a, b] = [await node(t, 'a', topic), await node(t, 'b', topic)];
  const before = await spreadOver([a, b], ['a', 'b']);
  await register(a, endpoint);
  await eventually(async () => (await admin(b, 'GET', '/deployments')).json?.deployments?.length === 1);
  const keys = Array.from({ length: 18 }, (_, i) => `m${i}`);
  // Calls through a and b, waiting on their keys' leaders (3 s sleeps) while c joins.
  const calls = Promise.all(keys.map((key, i) => ingress([a, b][i % 2], `/Slow/${key}/run`, null).catch((err) => ({ status: 0, body: String(err) }))));
  await eventually(() => keys.every((k) => slowRuns.has(k)));
  const c = await node(t, 'c', topic);
  const after = await spreadOver([a, b, c], ['a', 'b', 'c']);
  const moved = after.flatMap((l, p) => (l !== before[p] ? [p] : []));
  t.ok(moved.length >= 2 && moved.every((p) => after[p] === 'c'), `partitions ${moved.join(', ')} moved to c, nothing else moved (${before.join(' ')} → ${after.join(' ')})`);
  const answers = await calls;
  t.same(answers.map((r) => [r.status, r.body]), keys.map((k) => [200, `slept ${k}`]), 'every call answered with its result, those whose partition moved too');
  t.same(keys.map((k) => slowRuns.get(k)), keys.map(() => 1), "no call's recorded step ran twice");
  t.ok([a, b].every((k) => k.logs().includes('partition handed over')), 'a and b each logged handing partitions over');
});
