// Flow control end to end, through a real Keel process and real TS SDK services: scopes and
// limit keys at the ingress (Restate 1.7's paths, header and 400s), v7 propagation to the
// handler and through calls, idempotency per scope, and concurrency limits measured from the
// handler's side — under load, fair between tenants, and across a SIGKILL.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startKeel, serveServices, serveHandler, register, ingress, adminCall, query, eventually } from './helpers/keel.mjs';
import { scopePartitionKey } from '../dist/common/ids.js';

/** Per scope, the invocations whose handler body runs now (by id: a retried attempt is the same one) and the most at once. */
function gauges() {
  const live = new Map();
  const max = new Map();
  const order = [];
  const startTimes = new Map(); // scope → first-attempt start times (ms)
  return {
    live,
    max,
    order,
    startTimes,
    enter(scope, id) {
      if (!order.includes(id)) startTimes.set(scope, [...(startTimes.get(scope) ?? []), performance.now()]);
      let ids = live.get(scope);
      if (!ids) live.set(scope, (ids = new Map()));
      ids.set(id, (ids.get(id) ?? 0) + 1);
      max.set(scope, Math.max(max.get(scope) ?? 0, ids.size));
      order.push(id);
    },
    leave(scope, id) {
      const ids = live.get(scope);
      const n = (ids.get(id) ?? 1) - 1;
      if (n === 0) ids.delete(id);
      else ids.set(id, n);
    },
  };
}

const g = gauges();
const work = restate.service({
  name: 'Work',
  handlers: {
    /** Holds its slot for `ms` without a suspension point (the attempt stays open). */
    hold: async (ctx, req) => {
      const scope = ctx.request().scope ?? '-';
      const id = ctx.request().id;
      g.enter(scope, id);
      try {
        await new Promise((r) => setTimeout(r, req?.ms ?? 50));
      } finally {
        g.leave(scope, id);
      }
      return { tag: req?.tag, scope: ctx.request().scope ?? null, limitKey: ctx.request().limitKey ?? null };
    },
    who: async (ctx) => ({ scope: ctx.request().scope ?? null, limitKey: ctx.request().limitKey ?? null }),
    /** Calls Work/who in a scope with a limit key (protocol v7): what the callee saw comes back. */
    callScoped: async (ctx, req) => ctx.genericCall({ service: 'Work', method: 'who', parameter: new Uint8Array(), scope: req.scope, limitKey: req.limitKey, outputSerde: restate.serde.json }),
    /** Adds to Counter/{key} in a scope through ctx.scope(...).objectClient (protocol v7). */
    addScoped: async (ctx, req) => ctx.scope(req.scope).objectClient(counter, req.key).add(),
  },
});
const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx) => {
      const n = ((await ctx.get('n')) ?? 0) + 1;
      ctx.set('n', n);
      return { n, scope: ctx.request().scope ?? null };
    },
  },
});
const signup = restate.workflow({
  name: 'Signup',
  handlers: {
    run: async (ctx, who) => {
      ctx.set('who', who);
      return `${who} in ${ctx.request().scope ?? 'no scope'}: ${await ctx.promise('confirmed').get()}`;
    },
    confirm: async (ctx, how) => ctx.promise('confirmed').resolve(how),
  },
});

/** Answers a discovery request with the SDK's manifest plus `field` (what no SDK sends yet). */
function withManifestField(inner, req, res, field, value) {
  const chunks = [];
  let head = [200, {}];
  const capture = Object.create(res);
  capture.writeHead = (status, headers) => ((head = [status, headers ?? {}]), capture);
  capture.write = (chunk, cb) => (chunks.push(Buffer.from(chunk)), cb?.(), true);
  capture.end = (cb) => {
    const manifest = { ...JSON.parse(Buffer.concat(chunks).toString()), [field]: value };
    const body = Buffer.from(JSON.stringify(manifest));
    const headers = Object.fromEntries(Object.entries(head[1]).filter(([k]) => k.toLowerCase() !== 'content-length'));
    res.writeHead(head[0], { ...headers, 'content-length': body.length });
    res.end(body, cb);
  };
  inner(req, capture);
}

const CLI = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', '.bin', 'restate');
const { vqueueId: vqueueIdOf } = await import('../dist/common/limit-rules.js');
const putRules = (keel, rules) => adminCall(keel, 'PUT', '/limits/rules', rules);

t.test('flow control', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [work, counter, signup]));

  t.test('scoped paths and limit keys reach the handler; Restate 1.7 refusals', async (t) => {
    const ok = await ingress(keel, '/restate/scope/s1/call/Work/who', null, { 'x-restate-limit-key': 'tenant1/user42' });
    t.equal(ok.status, 200);
    t.same(ok.body, { scope: 's1', limitKey: 'tenant1/user42' }, 'the handler sees scope and limit key (StartMessage, v7)');
    const q = await ingress(keel, '/restate/scope/s1/call/Work/who?limit-key=tenant2', null);
    t.same(q.body, { scope: 's1', limitKey: 'tenant2' }, 'from ?limit-key=');
    const both = await ingress(keel, '/restate/scope/s1/call/Work/who?limit-key=q', null, { 'x-restate-limit-key': 'h/' });
    t.same(both.body, { scope: 's1', limitKey: 'h' }, 'the header wins; a trailing / is ignored');
    const empty = await ingress(keel, '/restate/scope/s1/call/Work/who?limit-key=', null);
    t.same(empty.body, { scope: 's1', limitKey: null }, 'an empty limit key is none');
    const sent = await ingress(keel, '/restate/scope/s1/send/Work/who', null);
    t.equal(sent.status, 202);
    t.equal(sent.body.status, 'Accepted');
    const id = ok.headers.get('x-restate-id');
    const rows = await query(keel, `SELECT scope, limit_key, status FROM sys_invocation WHERE id = '${id}'`);
    t.same(rows, [{ scope: 's1', limit_key: 'tenant1/user42', status: 'completed' }], 'sys_invocation shows them');

    const refusals = [
      ['/restate/scope/a%20b/call/Work/who', {}, 'bad scope value: value contains characters outside the allowed set [a-zA-Z0-9_.-]'],
      ['/restate/scope/a%2Fb/call/Work/who', {}, 'bad scope value: value contains characters outside the allowed set [a-zA-Z0-9_.-]'],
      [`/restate/scope/${'x'.repeat(37)}/call/Work/who`, {}, 'bad scope value: value too long: 37 bytes (max 36)'],
      ['/restate/scope//call/Work/who', {}, 'bad scope value: value cannot be empty'],
      ['/restate/call/Work/who?limit-key=t1', {}, 'limit-key requires a scope to be set'],
      ['/Work/who', { 'x-restate-limit-key': 't1' }, 'limit-key requires a scope to be set'],
      ['/restate/scope/s1/call/Work/who', { 'x-restate-limit-key': 'a/b/c' }, 'invalid limit-key: too many path components in the given limit-key (max 2)'],
      ['/restate/scope/s1/call/Work/who?limit-key=a%20b', {}, 'invalid limit-key: invalid limit-key component: value contains characters outside the allowed set [a-zA-Z0-9_.-]'],
      ['/restate/scope/s1/call/Work/who?limit-key=a//b', {}, 'invalid limit-key: invalid limit-key component: value cannot be empty'],
      ['/restate/scope/s1/call/Work/who', { 'x-restate-limit-key': 'y'.repeat(37) }, 'invalid limit-key: invalid limit-key component: value too long: 37 bytes (max 36)'],
    ];
    for (const [path, headers, message] of refusals) {
      const r = await ingress(keel, path, null, headers);
      t.equal(r.status, 400, `${path} → 400`);
      t.equal(r.body.message, `[KEEL0901] ${message}`, message);
      t.equal(r.body.restate_code, 'KEEL0901');
    }
    const noVerb = await ingress(keel, '/restate/scope/s1/Work/who', null);
    t.equal(noVerb.status, 404, 'a scoped path without call|send is not a route');
    // The server's log reaches the test through a pipe, after the answers.
    const logged = await eventually(() => keel.logLines('KEEL0901').length >= refusals.length, { timeout_ms: 5_000 }).catch(() => false);
    t.ok(logged, `each refusal is logged with its code (${keel.logLines('KEEL0901').length} of ${refusals.length})`);
  });

  t.test('virtual objects and workflows are per scope: state, locks, promises, runs', async (t) => {
    const add = (path) => ingress(keel, path, null).then((r) => r.body);
    t.same(await add('/restate/scope/s1/call/Counter/k1/add'), { n: 1, scope: 's1' });
    t.same(await add('/restate/scope/s1/call/Counter/k1/add'), { n: 2, scope: 's1' });
    t.same(await add('/restate/scope/s2/call/Counter/k1/add'), { n: 1, scope: 's2' }, 'the same key in another scope is another object');
    t.same(await add('/restate/call/Counter/k1/add'), { n: 1, scope: null }, 'and unscoped, another again');
    t.same(await add('/Counter/k1/add'), { n: 2, scope: null });
    const state = await query(keel, `SELECT scope, service_key, key, value_utf8 FROM state WHERE service_name = 'Counter' AND service_key = 'k1' ORDER BY scope NULLS FIRST`);
    t.same(state, [
      { service_key: 'k1', key: 'n', value_utf8: '2' }, // the unscoped one: JSON leaves NULL out, as Restate's
      { scope: 's1', service_key: 'k1', key: 'n', value_utf8: '2' },
      { scope: 's2', service_key: 'k1', key: 'n', value_utf8: '1' },
    ], 'the state table has one object per scope');
    // Through a handler: ctx.scope('inner').objectClient(Counter, 'k9').add() (protocol v7).
    const viaSdk = await ingress(keel, '/Work/addScoped', { scope: 'inner', key: 'k9' });
    t.same(viaSdk.body, { n: 1, scope: 'inner' });
    t.same(await query(keel, `SELECT scope, value_utf8 FROM state WHERE service_name = 'Counter' AND service_key = 'k9'`), [{ scope: 'inner', value_utf8: '1' }]);

    // A workflow per scope: its run, its promise, its state.
    const runsSentAt = Date.now();
    const runA = fetch(`${keel.ingress}/restate/scope/wa/call/Signup/w1/run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '"ada"' });
    const runB = fetch(`${keel.ingress}/restate/scope/wb/call/Signup/w1/run`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '"bob"' });
    await eventually(async () => (await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE target = 'Signup/w1/run' AND status <> 'pending'`))[0].n === 2);
    const locks = await query(keel, `SELECT scope, lock_name FROM sys_locks WHERE lock_name = 'Signup/w1' ORDER BY scope`);
    t.same(locks, [{ scope: 'wa', lock_name: 'Signup/w1' }, { scope: 'wb', lock_name: 'Signup/w1' }], 'sys_locks: one lock per scope');
    const held = await query(keel, `SELECT l.scope, CAST(l.partition_key AS VARCHAR) AS partition_key, l.acquired_at, l.acquired_by, i.scope AS holder_scope FROM sys_locks l JOIN sys_invocation i ON i.id = l.acquired_by WHERE l.lock_name = 'Signup/w1' ORDER BY l.scope`);
    t.same(held.map((l) => [l.scope, l.partition_key, l.holder_scope]), [['wa', String(scopePartitionKey('wa')), 'wa'], ['wb', String(scopePartitionKey('wb')), 'wb']], "each held by its scope's run, on its scope's partition");
    t.ok(held.every((l) => Date.parse(l.acquired_at) >= runsSentAt - 1000 && Date.parse(l.acquired_at) <= Date.now()), `acquired when the runs were sent (${held.map((l) => l.acquired_at)})`);
    const again = await ingress(keel, '/restate/scope/wa/call/Signup/w1/run', 'ada');
    t.equal(again.status, 409, 'a second run in the same scope: 409');
    await ingress(keel, '/restate/scope/wb/call/Signup/w1/confirm', 'by mail');
    t.equal(await (await runB).json(), 'bob in wb: by mail', "wb's run got wb's promise");
    await ingress(keel, '/restate/scope/wa/call/Signup/w1/confirm', 'by phone');
    t.equal(await (await runA).json(), 'ada in wa: by phone');
    const out = await fetch(`${keel.ingress}/restate/output`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ target: 'workflow', scope: 'wa', workflowName: 'Signup', workflowKey: 'w1' }) });
    t.equal(await out.json(), 'ada in wa: by phone', 'the output of the scoped run, by workflow target and scope');
    const promises = await query(keel, `SELECT scope, key, completion_success_value_utf8 AS v FROM sys_promise WHERE service_name = 'Signup' ORDER BY scope`);
    t.same(promises, [{ scope: 'wa', key: 'confirmed', v: '"by phone"' }, { scope: 'wb', key: 'confirmed', v: '"by mail"' }]);
  });

  t.test('idempotency keys are per scope', async (t) => {
    const call = (path) => ingress(keel, path, null, { 'idempotency-key': 'ik1' });
    const [a, b, c, a2] = [await call('/restate/scope/s1/call/Work/who'), await call('/restate/scope/s2/call/Work/who'), await call('/restate/call/Work/who'), await call('/restate/scope/s1/call/Work/who')];
    const ids = [a, b, c, a2].map((r) => r.headers.get('x-restate-id'));
    t.equal(new Set(ids.slice(0, 3)).size, 3, 'the same key in s1, s2 and unscoped: three invocations');
    t.equal(ids[3], ids[0], 'a repeat in s1 is the same invocation');
    const lookup = await fetch(`${keel.ingress}/restate/lookup`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ target: 'idempotentInvocation', scope: 's2', service: 'Work', handler: 'who', idempotencyKey: 'ik1' }) });
    t.same(await lookup.json(), { invocationId: ids[1] }, 'lookup with a scope finds the scoped one');
    const output = await fetch(`${keel.ingress}/restate/output`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ target: 'idempotentInvocation', scope: 's2', service: 'Work', handler: 'who', idempotencyKey: 'ik1' }) });
    t.same(await output.json(), { scope: 's2', limitKey: null });
  });

  t.test('v7 calls carry scope and limit key; a bad one is RT0024, retried', async (t) => {
    const r = await ingress(keel, '/Work/callScoped', { scope: 'inner', limitKey: 'acme/bob' });
    t.equal(r.status, 200);
    t.same(r.body, { scope: 'inner', limitKey: 'acme/bob' }, 'the callee saw them');
    const rows = await query(keel, `SELECT scope, limit_key, invoked_by FROM sys_invocation WHERE target = 'Work/who' AND scope = 'inner'`);
    t.same(rows, [{ scope: 'inner', limit_key: 'acme/bob', invoked_by: 'service' }]);
    const bad = await ingress(keel, '/Work/callScoped/send', { scope: 'inner', limitKey: 'a/b/c' });
    const id = bad.body.invocationId;
    const failure = await eventually(async () => (await query(keel, `SELECT last_failure_error_code AS code, last_failure AS f FROM sys_invocation WHERE id = '${id}' AND last_failure IS NOT NULL`))[0]);
    t.equal(failure.code, 'RT0024');
    t.match(failure.f, /the provided limit key 'a\/b\/c' is invalid: too many path components/);
    await adminCall(keel, 'PATCH', `/invocations/${id}/kill`);
  });

  t.test('a concurrency limit of 5 on a scope: 500 sends never run more than 5 at once', async (t) => {
    const put = await putRules(keel, [{ pattern: 'lim', limits: { concurrency: 5 } }]);
    t.equal(put.status, 200, put.text);
    // Five long ones take every slot first, so what is looked at below holds while it is looked at.
    const holders = await Promise.all(Array.from({ length: 5 }, (_, i) => ingress(keel, '/restate/scope/lim/send/Work/hold', { ms: 8000, tag: `long${i}` })));
    await eventually(() => g.live.get('lim')?.size === 5);
    const sends = await Promise.all(Array.from({ length: 495 }, (_, i) => ingress(keel, '/restate/scope/lim/send/Work/hold', { ms: 5, tag: i })));
    t.equal([...holders, ...sends].filter((r) => r.status === 202).length, 500, 'all accepted (none refused)');
    const metrics = await (await fetch(`${keel.admin}/metrics`)).text();
    const running = Number(/keel_flow_rule_invocations\{rule="lim",state="running"\} (\d+)/.exec(metrics)?.[1]);
    const queued = Number(/keel_flow_rule_invocations\{rule="lim",state="queued"\} (\d+)/.exec(metrics)?.[1]);
    t.same([running, queued], [5, 495], '/metrics per rule: 5 running, 495 queued');
    const waiting = await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'lim' AND status = 'pending'`);
    t.equal(waiting[0].n, 495, 'the rest wait as pending');
    const sched = await query(keel, `SELECT blocked_on, blocked_on_json, num_inbox FROM sys_scheduler WHERE id = '${vqueueIdOf('lim', '')}'`);
    t.same(sched.map((r) => [r.blocked_on, r.num_inbox]), [['limit-key-concurrency', 495]]);
    t.match(JSON.parse(sched[0].blocked_on_json), { resource: 'limit-key-concurrency', scope: 'lim', blocked_level: 'scope', blocked_rule: 'lim' }, 'sys_scheduler: blocked on the scope level of rule lim');
    const entries = await query(keel, `SELECT entry_id, stage, status FROM sys_vqueues WHERE id = '${vqueueIdOf('lim', '')}' ORDER BY sequence_number LIMIT 1`);
    t.match(entries, [{ stage: 'inbox', status: 'new' }], 'sys_vqueues: the waiting entries');
    t.ok(sends.some((r) => r.body.invocationId === entries[0]?.entry_id), 'its head is one of the 495 (the holders run)');
    await new Promise((r) => setTimeout(r, 300));
    const blocked = await query(keel, `SELECT epoch(total_blocked_on_concurrency_rules) AS concurrency_s, epoch(latest_attempt_blocked_on_concurrency_rules) AS latest_s,
      epoch(total_blocked_on_throttling_rules) AS rate_s, epoch(total_blocked_on_lock) AS lock_s, epoch(total_blocked_on_invoker_memory) AS memory_s,
      total_blocked_on_deployment_concurrency IS NULL AS deployment_unknown, num_attempts, first_runnable_at IS NOT NULL AS runnable
      FROM sys_vqueue_entry_status WHERE vqueue_id = '${vqueueIdOf('lim', '')}' ORDER BY sequence_number LIMIT 1`);
    t.ok(blocked[0]?.concurrency_s >= 0.3, `sys_vqueue_entry_status: the head has waited ${blocked[0]?.concurrency_s} s on the concurrency rule`);
    t.match(blocked[0], { latest_s: blocked[0]?.concurrency_s, rate_s: 0, lock_s: 0, memory_s: 0, deployment_unknown: true, num_attempts: 0, runnable: true }, 'for its first attempt; nothing on a rate or a lock');
    const head = await query(keel, `SELECT epoch(concurrency_rules_block_duration) AS concurrency_s, epoch(throttling_rules_block_duration) AS rate_s, epoch(lock_block_duration) AS lock_s FROM sys_scheduler WHERE id = '${vqueueIdOf('lim', '')}'`);
    t.ok(head[0]?.concurrency_s >= 0.3 && head[0]?.rate_s === 0 && head[0]?.lock_s === 0, `sys_scheduler: its head blocked on the concurrency rule for ${head[0]?.concurrency_s} s`);
    const limits = await query(keel, `SELECT scope, level, usage, concurrency_limit, rule_pattern, available, num_waiters FROM sys_user_limits WHERE scope = 'lim'`);
    t.same(limits, [{ scope: 'lim', level: 'Scope', usage: 5, concurrency_limit: 5, rule_pattern: 'lim', available: 0, num_waiters: 495 }], 'sys_user_limits: the scope counter, full');
    await eventually(async () => (await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'lim' AND status = 'completed'`))[0].n === 500, { timeout_ms: 60_000 });
    t.equal(g.max.get('lim'), 5, 'at most 5 at once, and the limit was reached');
    const [avg] = await query(keel, `SELECT epoch(avg_blocked_on_concurrency_rules) AS concurrency_s, epoch(avg_queue_duration) AS queue_s, epoch(avg_inbox_duration) AS inbox_s,
      epoch(avg_run_duration) AS run_s, epoch(avg_end_to_end_duration) AS end_to_end_s, epoch(avg_blocked_on_lock) AS lock_s, epoch(avg_blocked_on_invoker_throttling) AS throttling_s,
      avg_blocked_on_invoker_concurrency IS NULL AS invoker_unknown, avg_suspension_duration IS NULL AS never_suspended FROM sys_vqueue_meta WHERE id = '${vqueueIdOf('lim', '')}'`);
    t.ok(avg.concurrency_s > 0.1 && avg.queue_s > 0.1 && avg.inbox_s > 0.1, `sys_vqueue_meta: on average ${avg.concurrency_s} s waited for the rule (queue ${avg.queue_s} s, inbox ${avg.inbox_s} s)`);
    t.ok(avg.run_s >= 0.005 && avg.end_to_end_s >= avg.run_s, `ran ${avg.run_s} s on average, ${avg.end_to_end_s} s from due to end`);
    t.match(avg, { lock_s: 0, throttling_s: 0, invoker_unknown: true, never_suspended: true }, 'nothing on a lock or the invoker\'s throttling; the invoker\'s own waits not kept; none suspended');
  });

  t.test('fair between tenants: a quiet tenant is not queued behind a busy one', async (t) => {
    await putRules(keel, [{ pattern: 'fair', limits: { concurrency: 2 } }]);
    const busy = [];
    for (let i = 0; i < 100; i++) busy.push(ingress(keel, '/restate/scope/fair/send/Work/hold', { ms: 20, tag: `busy${i}` }, { 'x-restate-limit-key': 'busy' }));
    const busyIds = (await Promise.all(busy)).map((r) => r.body.invocationId);
    const quiet = [];
    for (let i = 0; i < 10; i++) quiet.push(ingress(keel, '/restate/scope/fair/send/Work/hold', { ms: 20, tag: `quiet${i}` }, { 'x-restate-limit-key': 'quiet' }));
    const quietIds = new Set((await Promise.all(quiet)).map((r) => r.body.invocationId));
    await eventually(async () => (await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'fair' AND status = 'completed'`))[0].n === 110, { timeout_ms: 60_000 });
    const starts = g.order.filter((id) => quietIds.has(id) || busyIds.includes(id));
    const lastQuiet = Math.max(...[...quietIds].map((id) => starts.indexOf(id)));
    // Taking turns, the quiet tenant's 10 have all started by about the 20th start; FIFO would put them after the 100.
    t.ok(lastQuiet < 30, `the quiet tenant's last start is #${lastQuiet} of ${starts.length}`);
    const left = await query(keel, `SELECT count(*) AS n FROM sys_user_limits WHERE scope = 'fair'`);
    t.equal(left[0].n, 0, 'no counter left in sys_user_limits once all completed');
  });

  t.test('a SIGKILL in the middle keeps every count right', async (t) => {
    await putRules(keel, [{ pattern: 'crash', limits: { concurrency: 3 } }]);
    const sends = await Promise.all(Array.from({ length: 40 }, (_, i) => ingress(keel, '/restate/scope/crash/send/Work/hold', { ms: 100, tag: i })));
    t.equal(sends.filter((r) => r.status === 202).length, 40);
    await eventually(async () => (await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'crash' AND status = 'completed'`))[0].n >= 6, { timeout_ms: 30_000 });
    await keel.restart();
    await eventually(async () => (await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'crash' AND status = 'completed'`))[0].n === 40, { timeout_ms: 60_000 });
    t.ok(g.max.get('crash') <= 3, `never more than 3 at once across the restart (${g.max.get('crash')})`);
    const running = await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'crash' AND status <> 'completed'`);
    t.equal(running[0].n, 0, 'nothing left running or waiting');
    // The counters are back to zero: a new burst runs 3 at once again, not fewer.
    g.max.delete('crash');
    await Promise.all(Array.from({ length: 9 }, () => ingress(keel, '/restate/scope/crash/call/Work/hold', { ms: 100 })));
    t.equal(g.max.get('crash'), 3, 'after the restart the limit still admits exactly 3');
  });

  t.test('a rate limit of 50/s holds within 5% over 20 s, spaced evenly', async (t) => {
    const put = await putRules(keel, [{ pattern: 'rated', limits: { rate: { starts: 50, interval_ms: 1000 } } }]);
    t.equal(put.status, 200, put.text);
    t.same(put.json[0].limits, { rate: { starts: 50, interval_ms: 1000 } });
    // 1,001 starts take 20 s at 50/s: sent in batches so that the queue never runs dry.
    const N = 1001;
    for (let i = 0; i < N; i += 100) {
      const batch = await Promise.all(Array.from({ length: Math.min(100, N - i) }, (_, j) => ingress(keel, '/restate/scope/rated/send/Work/hold', { ms: 1, tag: i + j })));
      t.equal(batch.filter((r) => r.status === 202).length, batch.length);
    }
    const throttled = Number(/keel_flow_rule_invocations\{rule="rated",state="throttled"\} (\d+)/.exec(await (await fetch(`${keel.admin}/metrics`)).text())?.[1]);
    t.ok(throttled > 0, `/metrics: ${throttled} waiting on the rate (state="throttled")`);
    await eventually(() => (g.startTimes.get('rated')?.length ?? 0) >= N, { timeout_ms: 40_000 });
    // Twice: as the handlers saw their starts, and as the partition started them (running_at: the
    // limiter's own times, without the delivery's jitter).
    const handler = g.startTimes.get('rated');
    const server = (await query(keel, `SELECT epoch_ms(running_at) AS at FROM sys_invocation WHERE scope = 'rated' ORDER BY running_at`)).map((r) => Number(r.at));
    t.equal(server.length, N);
    for (const [seen, times, burst] of [['handler', handler, 60], ['partition', server, 52]]) {
      const seconds = (times[N - 1] - times[0]) / 1000;
      const rate = (N - 1) / seconds;
      t.ok(Math.abs(rate - 50) <= 2.5, `${seen}: ${N - 1} spacings in ${seconds.toFixed(2)} s, ${rate.toFixed(2)} starts/s (goal 50 ± 5%)`);
      // Smooth, not bursty: no second saw many more than 50 starts (a bursty limiter would show 100).
      let worst = 0;
      for (let i = 0, j = 0; i < N; i++) {
        while (times[i] - times[j] > 1000) j++;
        worst = Math.max(worst, i - j + 1);
      }
      t.ok(worst <= burst, `${seen}: at most ${worst} starts in any 1 s window`);
    }
  });

  t.test('a backlog limit refuses with 429 and Retry-After; nothing accepted is lost', async (t) => {
    await putRules(keel, [{ pattern: 'bl', limits: { concurrency: 1, backlog: 5 } }]);
    const answers = [];
    for (let i = 0; i < 12; i++) answers.push(await ingress(keel, '/restate/scope/bl/send/Work/hold', { ms: 300, tag: i }, { 'x-restate-limit-key': 'x' }));
    const accepted = answers.filter((r) => r.status === 202);
    const refused = answers.filter((r) => r.status === 429);
    t.equal(accepted.length, 6, 'one runs, five wait');
    t.equal(refused.length, 6, 'the rest are refused');
    t.match(refused[0].body, { code: 429, restate_code: 'KEEL0902', message: /backlog of rule 'bl' is full: 5 invocations wait/ });
    t.ok(Number(refused[0].headers.get('retry-after')) >= 1, `Retry-After: ${refused[0].headers.get('retry-after')}`);
    t.equal(refused[0].headers.get('x-restate-id'), null, 'no invocation id: nothing was created');
    const ids = accepted.map((r) => r.body.invocationId);
    await eventually(async () => (await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'bl' AND status = 'completed'`))[0].n === 6, { timeout_ms: 30_000 });
    const rows = await query(keel, `SELECT id FROM sys_invocation WHERE scope = 'bl'`);
    t.same(rows.map((r) => r.id).sort(), [...ids].sort(), 'exactly the accepted ones exist, all completed');
    const after = await ingress(keel, '/restate/scope/bl/send/Work/hold', { ms: 1 });
    t.equal(after.status, 202, 'once drained, accepted again');
    t.ok(keel.logLines('KEEL0902').length >= 6, 'each refusal logged with its code');
    const metrics = await (await fetch(`${keel.admin}/metrics`)).text();
    t.match(metrics, /keel_flow_rule_rejected_total\{rule="bl"\} 6\b/, 'and counted per rule on /metrics');
  });

  t.test('priorities: x-keel-priority takes the next free slot first', async (t) => {
    await putRules(keel, [{ pattern: 'prio', limits: { concurrency: 1 } }]);
    const first = await ingress(keel, '/restate/scope/prio/send/Work/hold', { ms: 300, tag: 'first' });
    await eventually(() => g.live.get('prio')?.size === 1);
    const low = [];
    for (let i = 0; i < 5; i++) low.push((await ingress(keel, '/restate/scope/prio/send/Work/hold', { ms: 10, tag: `low${i}` })).body.invocationId);
    const high = (await ingress(keel, '/restate/scope/prio/send/Work/hold', { ms: 10, tag: 'high' }, { 'x-keel-priority': '9' })).body.invocationId;
    await eventually(async () => (await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'prio' AND status = 'completed'`))[0].n === 7, { timeout_ms: 30_000 });
    const order = g.order.filter((id) => [first.body.invocationId, high, ...low].includes(id));
    t.same(order, [first.body.invocationId, high, ...low], 'the priority 9 ran right after the one holding the slot, the 0s in arrival order');
    const bad = await ingress(keel, '/restate/scope/prio/send/Work/hold', {}, { 'x-keel-priority': '10' });
    t.equal(bad.status, 400);
    t.match(bad.body.message, /invalid x-keel-priority: '10' is not an integer from 0 to 9/);
    const unscoped = await ingress(keel, '/restate/send/Work/hold', {}, { 'x-keel-priority': '3' });
    t.match(unscoped.body.message, /x-keel-priority requires a scope to be set/);
  });

  t.test('a queue paused and resumed through the admin API; restate vqueues list shows it', async (t) => {
    await putRules(keel, [{ pattern: 'pz', limits: { concurrency: 5 } }]);
    const { vqueueId } = await import('../dist/common/limit-rules.js');
    const id = vqueueId('pz', 'tenant');
    const paused = await adminCall(keel, 'POST', `/vqueues/${id}/pause`);
    t.equal(paused.status, 202, paused.text);
    const sent = [];
    for (let i = 0; i < 3; i++) sent.push((await ingress(keel, '/restate/scope/pz/send/Work/hold', { ms: 1 }, { 'x-restate-limit-key': 'tenant' })).body.invocationId);
    await new Promise((r) => setTimeout(r, 300));
    const pending = await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'pz' AND status = 'pending'`);
    t.equal(pending[0].n, 3, 'all three wait though the rule has room');
    const meta = await query(keel, `SELECT id, queue_is_paused, scope, limit_key, num_inbox FROM sys_vqueue_meta WHERE scope = 'pz'`);
    t.same(meta, [{ id, queue_is_paused: true, scope: 'pz', limit_key: 'tenant', num_inbox: 3 }]);
    t.same(await query(keel, `SELECT blocked_on, num_inbox FROM sys_scheduler WHERE id = '${id}'`), [{ blocked_on: 'paused', num_inbox: 3 }], 'sys_scheduler: paused');
    t.equal((await query(keel, `SELECT count(*) AS n FROM sys_vqueues WHERE id = '${id}'`))[0].n, 3, 'sys_vqueues: three entries');
    const statuses = await query(keel, `SELECT entry_id, stage, status FROM sys_vqueue_entry_status WHERE vqueue_id = '${id}' ORDER BY sequence_number`);
    t.same(statuses.map((e) => [e.entry_id, e.stage, e.status]), sent.map((i) => [i, 'inbox', 'new']), 'sys_vqueue_entry_status: each, in order');
    const ls = await new Promise((resolve) => execFile(CLI, ['vqueues', 'list'], { env: { PATH: process.env.PATH, HOME: keel.dir, RESTATE_ADMIN_URL: keel.admin, CI: '1', NO_COLOR: '1', TERM: 'dumb' }, timeout: 30_000 }, (err, stdout, stderr) => resolve(String(stdout) + String(stderr))));
    t.match(ls, id, `restate vqueues list shows the queue:\n${ls}`);
    const resumed = await adminCall(keel, 'POST', `/vqueues/${id}/resume`);
    t.equal(resumed.status, 202);
    await eventually(async () => (await query(keel, `SELECT count(*) AS n FROM sys_invocation WHERE scope = 'pz' AND status = 'completed'`))[0].n === 3);
    t.pass('resumed: all three ran');
    const bad = await adminCall(keel, 'POST', '/vqueues/vq_nonsense!/pause');
    t.equal(bad.status, 404);
    t.match(bad.json, { restate_code: 'KEEL0004' });
  });

  t.test('a deployment limit: at most N attempts against it at once, scoped or not; raised, the rest run', async (t) => {
    const deployments = (await adminCall(keel, 'GET', '/deployments')).json.deployments;
    const id = deployments[0].id;
    t.same((await adminCall(keel, 'GET', `/deployments/${id}/limits`)).json, { deployment: id, concurrency: null, manifest_invocations: null, effective_concurrency: null }, 'no limit at first');
    const set = await adminCall(keel, 'PUT', `/deployments/${id}/limits`, { concurrency: 2 });
    t.same([set.status, set.json], [200, { deployment: id, concurrency: 2, manifest_invocations: null, effective_concurrency: 2 }]);
    g.max.delete('-');
    const calls = Promise.all(Array.from({ length: 12 }, (_, i) => ingress(keel, '/Work/hold', { ms: 100, tag: i })));
    await eventually(() => g.live.get('-')?.size === 2);
    await new Promise((r) => setTimeout(r, 150));
    t.equal(g.live.get('-')?.size, 2, 'two run, the rest wait in the invoker');
    const metrics = await (await fetch(`${keel.admin}/metrics`)).text();
    const waitingAttempts = Number(/keel_invoker_attempts_waiting (\d+)/.exec(metrics)?.[1]);
    t.ok(waitingAttempts >= 8, `the parked attempts are counted as waiting (${waitingAttempts})`);
    // Raised while they wait: the waiting ones go at once.
    await adminCall(keel, 'PUT', `/deployments/${id}/limits`, { concurrency: 6 });
    const answers = await calls;
    t.equal(answers.filter((r) => r.status === 200).length, 12, 'all answered');
    t.ok(g.max.get('-') <= 6 && g.max.get('-') > 2, `at most the limit at once (${g.max.get('-')})`);
    const bad = await adminCall(keel, 'PUT', `/deployments/${id}/limits`, { concurrency: 0 });
    t.same([bad.status, bad.json?.restate_code], [400, 'KEEL0002']);
    const missing = await adminCall(keel, 'PUT', '/deployments/dp_nope/limits', { concurrency: 3 });
    t.equal(missing.status, 404);
    // A parked attempt whose invocation is killed takes no slot: the next one runs in its place.
    await adminCall(keel, 'PUT', `/deployments/${id}/limits`, { concurrency: 1 });
    const sendHold = async (ms, tag) => (await ingress(keel, '/Work/hold/send', { ms, tag })).body.invocationId;
    const first = await sendHold(400, 'park-a');
    await eventually(() => g.live.get('-')?.size === 1);
    const parked = await sendHold(400, 'park-b');
    const next = await sendHold(10, 'park-c');
    await adminCall(keel, 'PATCH', `/invocations/${parked}/kill`);
    const done = await eventually(async () => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${next}' AND status = 'completed'`)).length === 1, { timeout_ms: 10_000 }).then(() => true, () => false);
    t.ok(done, 'the one behind a killed parked attempt ran');
    void first;
    await adminCall(keel, 'PUT', `/deployments/${id}/limits`, { concurrency: 6 });
    // It survives a restart (metadata), and null lifts it.
    await keel.restart();
    t.same((await adminCall(keel, 'GET', `/deployments/${id}/limits`)).json, { deployment: id, concurrency: 6, manifest_invocations: null, effective_concurrency: 6 });
    await adminCall(keel, 'PUT', `/deployments/${id}/limits`, { concurrency: null });
    t.same((await adminCall(keel, 'GET', `/deployments/${id}/limits`)).json, { deployment: id, concurrency: null, manifest_invocations: null, effective_concurrency: null });
  });

  t.test("the manifest's limits.invocations: enforced as the deployment's limit, an operator's limit replaces it", async (t) => {
    // No SDK declares it yet (Restate 1.7 stores the field for 1.8 and enforces nothing): the
    // real SDK endpoint's manifest gets it on its way to Keel.
    const capped = restate.service({
      name: 'Capped',
      handlers: {
        hold: async (ctx, req) => {
          const id = ctx.request().id;
          g.enter('capped', id);
          try {
            await new Promise((r) => setTimeout(r, req?.ms ?? 50));
          } finally {
            g.leave('capped', id);
          }
          return { ok: true };
        },
      },
    });
    const inner = restate.createEndpointHandler({ services: [capped] });
    let limits = { invocations: 2 };
    const uri = await serveHandler(t, (req, res) => (req.url.startsWith('/discover') ? withManifestField(inner, req, res, 'limits', limits) : inner(req, res)));
    const registered = await adminCall(keel, 'POST', '/deployments', { uri });
    t.equal(registered.status, 201, registered.text);
    const id = registered.json.id;
    t.same((await adminCall(keel, 'GET', `/deployments/${id}/limits`)).json, { deployment: id, concurrency: null, manifest_invocations: 2, effective_concurrency: 2 });
    /** `n` calls at once: how many ran at the same time, at most. */
    const burst = async (n) => {
      g.max.delete('capped');
      const answers = await Promise.all(Array.from({ length: n }, () => ingress(keel, '/Capped/hold', { ms: 150 })));
      t.equal(answers.filter((r) => r.status === 200).length, n, `${n} calls answered`);
      return g.max.get('capped');
    };
    t.equal(await burst(8), 2, 'two at once (8 calls)');
    const set = await adminCall(keel, 'PUT', `/deployments/${id}/limits`, { concurrency: 4 });
    t.same(set.json, { deployment: id, concurrency: 4, manifest_invocations: 2, effective_concurrency: 4 }, "the operator's limit wins");
    t.equal(await burst(12), 4, 'four at once (12 calls)');
    await adminCall(keel, 'PUT', `/deployments/${id}/limits`, { concurrency: null });
    await keel.restart();
    t.same((await adminCall(keel, 'GET', `/deployments/${id}/limits`)).json, { deployment: id, concurrency: null, manifest_invocations: 2, effective_concurrency: 2 }, "lifted: the manifest's again, also after a restart");
    t.equal(await burst(6), 2, 'two at once again (6 calls)');

    // Bad values fail the registration (a bad discovery response: 502, as every META0013); 0 is no limit.
    for (const [value, why] of [[{ invocations: -1 }, 'limits.invocations must be an integer from 0 (no limit) to 4294967295: got -1'], [{ invocations: 1.5 }, 'got 1.5'], [[3], 'limits must be an object']]) {
      limits = value;
      const r = await adminCall(keel, 'POST', '/deployments', { uri, force: true });
      t.equal(r.status, 502, `${JSON.stringify(value)} → 502`);
      t.match(r.json?.message, why);
      t.equal(r.json?.restate_code, 'META0013');
    }
    limits = { invocations: 0 };
    const unlimited = await adminCall(keel, 'POST', '/deployments', { uri, force: true });
    t.equal(unlimited.status, 200, `replaced in place (force): ${unlimited.text}`);
    t.same((await adminCall(keel, 'GET', `/deployments/${unlimited.json.id}/limits`)).json.effective_concurrency, null, '0: no limit');
    const most = await burst(6);
    t.ok(most > 2, `more than two at once (${most} of 6)`);
  });

  t.test('sys_vqueue_meta counts a queue\'s running, paused and finished invocations, and when one last started, attempted, finished', async (t) => {
    const row = async () => (await query(keel, `SELECT is_active, num_inbox, num_running, num_suspended, num_paused, num_finished, created_at, last_start_at, last_attempt_at, last_finish_at FROM sys_vqueue_meta WHERE scope = 'meta' AND limit_key = 'lk'`))[0];
    const before = Date.now();
    const id = (await ingress(keel, '/restate/scope/meta/send/Signup/w1/run', 'ann', { 'x-restate-limit-key': 'lk' })).body.invocationId;
    const running = await eventually(async () => {
      const r = await row();
      return r?.num_running === 1 ? r : undefined;
    });
    t.same({ ...running, created_at: undefined, last_start_at: undefined, last_attempt_at: undefined }, { is_active: true, num_inbox: 0, num_running: 1, num_suspended: 0, num_paused: 0, num_finished: 0, created_at: undefined, last_start_at: undefined, last_attempt_at: undefined }, 'the run waits for its promise; none finished yet (last_finish_at NULL)');
    t.ok(Date.parse(running.last_start_at) >= before - 5 && running.last_attempt_at === running.last_start_at, 'it started (its first attempt) after it was sent');
    t.ok((await adminCall(keel, 'PATCH', `/invocations/${id}/pause`)).status < 300);
    const paused = await eventually(async () => {
      const r = await row();
      return r?.num_paused === 1 ? r : undefined;
    });
    t.same({ running: paused.num_running, active: paused.is_active }, { running: 0, active: true }, 'paused: counted as paused, not running');
    t.ok((await adminCall(keel, 'PATCH', `/invocations/${id}/resume`)).status < 300);
    const resumed = await eventually(async () => {
      const r = await row();
      return r?.num_running === 1 && r.num_paused === 0 ? r : undefined;
    });
    t.ok(Date.parse(resumed.last_attempt_at) > Date.parse(resumed.last_start_at), 'the resumption is an attempt, not a start');
    t.equal((await ingress(keel, '/restate/scope/meta/call/Signup/w1/confirm', 'yes', { 'x-restate-limit-key': 'lk' })).status, 200);
    const done = await eventually(async () => {
      const r = await row();
      return r?.num_finished === 2 && r.num_running === 0 ? r : undefined;
    });
    t.same({ paused: done.num_paused, active: done.is_active }, { paused: 0, active: false }, 'both finished: the run and the confirm call');
    t.ok(Date.parse(done.last_finish_at) >= Date.parse(done.last_attempt_at), 'when the last one finished');
  });

  t.test('restart-as-new keeps the scope and limit key', async (t) => {
    const done = await ingress(keel, '/restate/scope/again/call/Work/who', null, { 'x-restate-limit-key': 'ten' });
    const restarted = await adminCall(keel, 'PATCH', `/invocations/${done.headers.get('x-restate-id')}/restart-as-new`);
    t.equal(restarted.status, 200, restarted.text);
    const id = restarted.json.new_invocation_id;
    const row = await eventually(async () => (await query(keel, `SELECT scope, limit_key, status FROM sys_invocation WHERE id = '${id}' AND status = 'completed'`))[0]);
    t.same(row, { scope: 'again', limit_key: 'ten', status: 'completed' });
    const output = await fetch(`${keel.ingress}/restate/output/${id}`);
    t.same(await output.json(), { scope: 'again', limitKey: 'ten' }, 'the handler saw them again');
  });
});
