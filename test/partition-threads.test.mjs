// Partitions on worker threads (worker.threads > 1, issue 23) through a real Keel process and real
// SDK services: calls land on every thread, an object's calls cross threads through the outbox
// mesh, awakeables and admin actions reach the thread that owns the invocation, SQL, /partitions
// and /metrics answer for every thread, a deployment's limit holds for the process, the store
// outlives a change of the thread count and a SIGKILL, a thread's end stops the process, and what
// threads cannot do yet is refused. (Kafka subscriptions on threads: threads-suites.test.mjs.)
// (`KEEL_TEST_THREADS=3` runs any other suite against threads: test/helpers/keel.mjs.)
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { fileURLToPath } from 'node:url';
import { InvocationId } from '../dist/common/ids.js';
import { adminCall, eventually, ingress, query, register, serveServices, startKeel, tempDir } from './helpers/keel.mjs';

const PARTITIONS = 8;
const awakeables = new Map();
const concurrency = { now: 0, most: 0 };
/** When each attempt of Fan/slow entered its run (ms since the epoch); runs end once `slow.release()` is called. */
const slowRuns = [];
const slow = { gate: Promise.resolve(), release: () => {} };
/** Fan/gate's callbacks by tag. */
const started = new Map();

const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, n) => {
      const value = ((await ctx.get('value')) ?? 0) + n;
      ctx.set('value', value);
      return value;
    },
    get: async (ctx) => (await ctx.get('value')) ?? 0,
  },
});

const fan = restate.service({
  name: 'Fan',
  handlers: {
    /** Adds 1 to `keys` counters (their partitions spread over the threads); returns what they answered. */
    spread: async (ctx, { prefix, keys }) => {
      const calls = Array.from({ length: keys }, (_, i) => ctx.objectClient(counter, `${prefix}-${i}`).add(1));
      return Promise.all(calls);
    },
    echo: async (_ctx, v) => v,
    wait: async (ctx, tag) => {
      const a = ctx.awakeable();
      awakeables.set(tag, a.id);
      return a.promise;
    },
    slow: async (ctx) => {
      await ctx.run('slow', async () => {
        slowRuns.push(Date.now());
        await slow.gate;
      });
      return 'slow';
    },
    /** Tells `started` its awakeable when it runs, and ends with what the awakeable is resolved with. */
    gate: async (ctx, tag) => {
      const a = ctx.awakeable();
      started.get(tag)?.(a.id);
      return a.promise;
    },
    hold: async (ctx) => {
      await ctx.run('hold', async () => {
        concurrency.now++;
        concurrency.most = Math.max(concurrency.most, concurrency.now);
        await new Promise((r) => setTimeout(r, 150));
        concurrency.now--;
      });
      return 'held';
    },
  },
});

async function setup(t, { threads = '3', dir, uri, env = {} } = {}) {
  const keel = await startKeel(t, { ...(dir ? { dir } : {}), env: { KEEL_WORKER__PARTITIONS: String(PARTITIONS), KEEL_WORKER__THREADS: threads, ...env } });
  const endpoint = uri ?? (await serveServices(t, [counter, fan]));
  if (uri === undefined) await register(keel, endpoint);
  return { keel, endpoint };
}

/** The partition of an invocation id, as the server maps keys (⌊key · partitions / 2⁶⁴⌋). */
const partitionOf = (id) => Number((InvocationId.parse(id).partitionKey * BigInt(PARTITIONS)) >> 64n);

/** Each partition's thread, by the ranges the server logged. */
function ownersOf(keel) {
  const line = keel.output.split('\n').filter((l) => l.includes('partition threads started')).pop();
  const per = JSON.parse(line).partitions_per_thread;
  return per.flatMap((n, thread) => Array.from({ length: n }, () => thread));
}

t.test('three threads: plain calls on every thread, object calls across them, awakeables, SQL, /partitions, /metrics', async (t) => {
  const { keel } = await setup(t);
  const ready = keel.output.split('\n').find((l) => l.includes('keel is ready'));
  t.equal(JSON.parse(ready).threads, 3, 'the ready line says how many threads');
  const owners = ownersOf(keel);
  t.same(owners, [0, 0, 0, 1, 1, 1, 2, 2], 'contiguous ranges of partitions');

  const echoes = await Promise.all(Array.from({ length: 60 }, (_, i) => ingress(keel, '/Fan/echo', { i })));
  t.ok(echoes.every((r, i) => r.status === 200 && r.body.i === i), 'sixty plain calls answered, each with its own input');

  const spread = await ingress(keel, '/Fan/spread', { prefix: 'a', keys: 24 });
  t.equal(spread.status, 200, JSON.stringify(spread.body));
  t.same(spread.body, Array.from({ length: 24 }, () => 1), 'each counter added once');
  const again = await ingress(keel, '/Fan/spread', { prefix: 'a', keys: 24 });
  t.same(again.body, Array.from({ length: 24 }, () => 2), 'and again: their state is where their calls go');

  const rows = await query(keel, 'SELECT target_service_name AS service, count(*) AS n FROM sys_invocation GROUP BY target_service_name ORDER BY service');
  t.same(rows, [{ service: 'Counter', n: 48 }, { service: 'Fan', n: 62 }], 'SQL counts the invocations of every thread');
  const byPartition = (await adminCall(keel, 'GET', '/partitions')).json.partitions;
  t.same(byPartition.map((p) => p.id), [0, 1, 2, 3, 4, 5, 6, 7], '/partitions lists every partition, in order');
  const threadsUsed = new Set(byPartition.filter((p) => p.applied_log_position > 0).map((p) => owners[p.id]));
  t.same([...threadsUsed].sort(), [0, 1, 2], 'every thread applied commands');

  const metrics = await (await fetch(`${keel.admin}/metrics`)).text();
  const completed = [...metrics.matchAll(/^keel_invocations_completed_total\{service="(\w+)",handler="(\w+)",outcome="succeeded"\} (\d+)/gm)].map((m) => `${m[1]}/${m[2]}=${m[3]}`);
  t.same(completed.sort(), ['Counter/add=48', 'Fan/echo=60', 'Fan/spread=2'], '/metrics sums every thread\'s cells');
  t.match(metrics, /^nodejs_heap_size_used_bytes \d+/m, 'and the process metrics once');
  t.equal((await fetch(`${keel.admin}/health`)).status, 200);

  const sent = await ingress(keel, '/Fan/wait/send', 'w1');
  t.equal(sent.status, 202);
  const id = await eventually(() => awakeables.get('w1'));
  const resolved = await fetch(`${keel.ingress}/restate/awakeables/${id}/resolve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify('woken') });
  t.equal(resolved.status, 202, 'the awakeable resolved through the thread that owns it');
  const out = await fetch(`${keel.ingress}/restate/invocation/${sent.body.invocationId}/attach`);
  t.same(await out.json(), 'woken');
});

t.test('admin actions reach the owning thread: cancel, purge, state, journal', async (t) => {
  const { keel } = await setup(t);
  const sent = await ingress(keel, '/Fan/wait/send', 'c1');
  const id = sent.body.invocationId;
  await eventually(() => awakeables.get('c1'));
  const cancelled = await adminCall(keel, 'PATCH', `/invocations/${id}/cancel`);
  t.equal(cancelled.status, 202, cancelled.text);
  const attached = await fetch(`${keel.ingress}/restate/invocation/${id}/attach`);
  t.equal(attached.status, 409, 'the cancelled invocation failed');
  const journal = await query(keel, `SELECT index, entry_type FROM sys_journal WHERE id = '${id}' ORDER BY index`);
  t.ok(journal.length >= 2, `its journal read from its thread (${journal.length} entries)`);
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${id}/purge`)).status, 200, 'purged');
  t.same(await query(keel, `SELECT id FROM sys_invocation WHERE id = '${id}'`), [], 'and gone');

  await ingress(keel, '/Counter/k1/add', 5);
  const state = await query(keel, "SELECT service_key, key, value_utf8 FROM state WHERE service_name = 'Counter'");
  t.same(state, [{ service_key: 'k1', key: 'value', value_utf8: '5' }], 'object state from the thread that holds it');
  const missing = await adminCall(keel, 'PATCH', '/invocations/inv_1nope/cancel');
  t.ok(missing.status >= 400 && missing.status < 500, `a malformed id is refused (${missing.status})`);
});

t.test('a query sees a start its client has seen, though no request of the client made it (the thread posts it after its turn)', async (t) => {
  const { keel } = await setup(t);
  const rules = await adminCall(keel, 'PUT', '/limits/rules', [{ pattern: 'one', limits: { concurrency: 1 } }]);
  t.equal(rules.status, 200, rules.text);
  // One at a time in scope 'one': each starts when the one before completes, by the partition's
  // own doing; its handler tells the test, which asks SQL at once.
  const N = 60;
  const ids = [];
  const awakeable = Array.from({ length: N }, (_, i) => new Promise((resolve) => started.set(`g${i}`, resolve)));
  for (let i = 0; i < N; i++) {
    const sent = await ingress(keel, '/restate/scope/one/send/Fan/gate', `g${i}`);
    t.equal(sent.status, 202, JSON.stringify(sent.body));
    ids.push(sent.body.invocationId);
  }
  const seen = [];
  for (let i = 0; i < N; i++) {
    const a = await awakeable[i];
    const [row] = await query(keel, `SELECT status FROM sys_invocation WHERE id = '${ids[i]}'`);
    seen.push(row?.status ?? 'no row');
    const resolved = await fetch(`${keel.ingress}/restate/awakeables/${a}/resolve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '"go"' });
    t.equal(resolved.status, 202);
  }
  const behind = seen.map((s, i) => [i, s]).filter(([, s]) => s !== 'running' && s !== 'suspended');
  t.same(behind, [], `every started invocation is running or suspended in SQL (${N} asked)`);
});

t.test('a deployment limit holds for the process, not per thread', async (t) => {
  const { keel } = await setup(t);
  const deployment = (await adminCall(keel, 'GET', '/deployments')).json.deployments[0].id;
  const set = await adminCall(keel, 'PUT', `/deployments/${deployment}/limits`, { concurrency: 2 });
  t.equal(set.status, 200, set.text);
  concurrency.most = 0;
  const calls = await Promise.all(Array.from({ length: 18 }, () => ingress(keel, '/Fan/hold', null)));
  t.ok(calls.every((r) => r.status === 200 && r.body === 'held'), 'all eighteen ran');
  t.equal(concurrency.most, 2, 'never more than two at once, though they started on three threads');
});

t.test('the store outlives the thread count: 3 threads, then 2, then 1, then 3 after a SIGKILL', async (t) => {
  const dir = tempDir(t);
  const first = await setup(t, { dir, threads: '3' });
  const keyed = await ingress(first.keel, '/Fan/echo', 'kept', { 'idempotency-key': 'k-1' });
  t.equal(keyed.status, 200);
  await ingress(first.keel, '/Fan/spread', { prefix: 'r', keys: 16 });
  await first.keel.stop();
  for (const threads of ['2', '1']) {
    const { keel } = await setup(t, { dir, threads, uri: first.endpoint });
    const same = await ingress(keel, '/Fan/echo', 'other input', { 'idempotency-key': 'k-1' });
    t.same(same.body, 'kept', `${threads} thread(s): the idempotency key answers the stored result`);
    const spread = await ingress(keel, '/Fan/spread', { prefix: 'r', keys: 16 });
    t.same(spread.body, Array.from({ length: 16 }, () => Number(threads === '2' ? 2 : 3)), `${threads} thread(s): every counter's state is there`);
    await keel.stop();
  }
  const { keel } = await setup(t, { dir, threads: '3', uri: first.endpoint });
  const sends = await Promise.all(Array.from({ length: 40 }, (_, i) => ingress(keel, '/Counter/s/add/send', 1, { 'idempotency-key': `s-${i}` })));
  t.ok(sends.every((r) => r.status === 202), 'forty sends accepted');
  await keel.restart(); // SIGKILL
  await eventually(async () => (await ingress(keel, '/Counter/s/get', null)).body === 40, { timeout_ms: 20_000 });
  t.pass('every accepted send ran once after the SIGKILL');
  const total = await query(keel, "SELECT count(*) AS n FROM sys_invocation WHERE target_service_name = 'Counter' AND target_handler_name = 'add'");
  t.same(total, [{ n: 16 * 3 + 40 }], 'no invocation lost or doubled');
});

t.test('a partition thread that ends while serving stops the server; the restart runs what was accepted, once it listens', async (t) => {
  const fault = fileURLToPath(new URL('./helpers/thread-fault.cjs', import.meta.url));
  const { keel } = await setup(t, { dir: tempDir(t), env: { NODE_OPTIONS: `--require ${fault}`, END_PARTITION_THREAD: '1' } });
  slowRuns.length = 0;
  // Every first run waits until the process has ended: none is journaled, so each runs again after the restart.
  slow.gate = new Promise((resolve) => (slow.release = resolve));
  const sends = await Promise.all(Array.from({ length: 24 }, (_, i) => ingress(keel, '/Fan/slow/send', i)));
  t.ok(sends.every((r) => r.status === 202), 'twenty-four sends accepted');
  const owners = ownersOf(keel);
  const onThread1 = sends.filter((r) => owners[partitionOf(r.body.invocationId)] === 1).length;
  t.ok(onThread1 > 0, `some of them on thread 1 (${onThread1})`);
  await eventually(() => slowRuns.length === 24);

  process.kill(keel.proc.pid, 'SIGUSR2'); // thread 1 ends (test/helpers/thread-fault.cjs)
  t.same(await keel.exited, { code: 1, signal: null }, 'the process exits with 1');
  const fatal = keel.logLines('KEEL0503');
  t.equal(fatal.length, 1, 'one KEEL0503 line');
  t.match(fatal[0], { level: 60, thread: 1, msg: /partition thread 1 stopped: the server stops/ }, 'at fatal level, naming the thread');
  const endedAt = Date.now();
  slow.release();

  await keel.launch();
  const readyAt = Date.parse(JSON.parse(keel.output.split('\n').filter((l) => l.includes('keel is ready')).pop()).time);
  await eventually(async () => {
    const rows = await query(keel, "SELECT status FROM sys_invocation WHERE target_handler_name = 'slow'");
    return rows.length === 24 && rows.every((r) => r.status === 'completed');
  }, { timeout_ms: 20_000 });
  t.pass('all twenty-four completed after the restart');
  const again = slowRuns.filter((at) => at > endedAt);
  t.equal(again.length, 24, 'each run again (its run had not been journaled when the process ended)');
  // The ready line is logged right after the listen and the threads' go; the slack covers two threads' clocks.
  t.ok(again.every((at) => at >= readyAt - 50), `no attempt before the server listened (first ${Math.min(...again) - readyAt} ms after the ready line)`);
});

t.test('a partition thread that ends during the stop: the stop still ends, says so, and the next start runs what was accepted', async (t) => {
  const fault = fileURLToPath(new URL('./helpers/thread-fault.cjs', import.meta.url));
  const { keel } = await setup(t, { dir: tempDir(t), env: { NODE_OPTIONS: `--require ${fault}`, END_PARTITION_THREAD: '1', END_PARTITION_THREAD_ON: 'stop' } });
  slowRuns.length = 0;
  slow.gate = new Promise((resolve) => (slow.release = resolve));
  const sends = await Promise.all(Array.from({ length: 24 }, (_, i) => ingress(keel, '/Fan/slow/send', i)));
  t.ok(sends.every((r) => r.status === 202), 'twenty-four sends accepted');
  const owners = ownersOf(keel);
  t.ok(sends.some((r) => owners[partitionOf(r.body.invocationId)] === 1), 'some of them on thread 1');
  await eventually(() => slowRuns.length === 24);

  // Thread 1 is ended instead of receiving the stop (test/helpers/thread-fault.cjs): it never says 'stopped'.
  const stopAt = Date.now();
  await keel.stop();
  t.same(await keel.exited, { code: 0, signal: null }, `the stop ends (${Date.now() - stopAt} ms), with 0`);
  const lines = keel.logLines('KEEL0503');
  t.equal(lines.length, 1, 'one KEEL0503 line');
  t.match(lines[0], { level: 40, thread: 1, msg: /partition thread 1 ended during the stop before it closed its partitions/ }, 'a warning naming the thread, not a fatal line');
  const endedAt = Date.now();
  slow.release();

  await keel.launch();
  await eventually(async () => {
    const rows = await query(keel, "SELECT status FROM sys_invocation WHERE target_handler_name = 'slow'");
    return rows.length === 24 && rows.every((r) => r.status === 'completed');
  }, { timeout_ms: 20_000 });
  t.pass('all twenty-four completed after the next start');
  t.equal(slowRuns.filter((at) => at > endedAt).length, 24, 'each ran again (none had its run journaled)');
});

t.test('what threads cannot do yet is refused, with the reason', async (t) => {
  const cluster = await startKeel(t, { env: { KEEL_WORKER__THREADS: '2', KEEL_CLUSTER__BROKERS: '127.0.0.1:1', KEEL_CLUSTER__NODE_NAME: 'n1' } }).catch((err) => err);
  t.match(String(cluster?.message), /RT0002[^\n]*'worker\.threads' is 2: a cluster node needs worker\.threads = 1 \(or auto\)/, 'a cluster node with threads does not start');
  const bad = await startKeel(t, { env: { KEEL_WORKER__THREADS: 'many' } }).catch((err) => err);
  t.match(String(bad?.message), /RT0002[^\n]*KEEL_WORKER__THREADS[^\n]*auto[^\n]*or a positive integer, got[^\n]*many/, 'a thread count that is not one');
});
