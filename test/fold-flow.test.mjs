// Flow control in the partition fold, without a server: concurrency limits per scope and per
// limit-key level, the queues of those waiting (fair between limit keys), slots freed by
// suspension and completion, rule changes, cancel/kill of a waiter, and a reload from the store.
import t from 'tap';
import { partition, invoke, ended, completeWith, kinds, find, ManageAction, Outcome, InvocationId, append, output, objectId, objectInvoke, MessageType } from './helpers/fold.mjs';
import { scopePartitionKey } from '../dist/common/ids.js';
import { loadState } from '../dist/partition/recovery.js';
import { openWorkerStore } from '../dist/storage/store.js';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const scopedId = (scope) => InvocationId.random(scopePartitionKey(scope));
const rules = (version, list) => ({ kind: 'limit_rules', limit_rules: { version, rules: list.map(([pattern, concurrency, disabled = false]) => ({ pattern, concurrency, disabled, version })) } });
const scoped = (id, scope, limit_key, fields = {}) => invoke(id, { scope, ...(limit_key ? { limit_key } : {}), ...fields });
const started = (actions) => find(actions, 'start').map((a) => a.id);
/** Ends `id`'s current attempt at log time `at`: with an output first when it ends (END), else as `outcome` says. */
function endAttempt(p, id, at, outcome = Outcome.END, fields = {}) {
  const s = p.status(id);
  if (outcome === Outcome.END) p.apply(append(id, s.epoch, MessageType.OutputCommand, output('x')), at);
  return p.apply(ended(id, s.epoch, outcome, fields), at);
}

t.test('a scope limit of 2: the third waits as pending, and starts when a slot frees', async (t) => {
  const p = partition();
  p.apply(rules(1, [['s1', 2]]));
  const [a, b, c] = [scopedId('s1'), scopedId('s1'), scopedId('s1')];
  t.same(kinds(p.apply(scoped(a, 's1'))), ['start']);
  t.same(kinds(p.apply(scoped(b, 's1'))), ['start']);
  t.same(kinds(p.apply(scoped(c, 's1'))), [], 'the third waits');
  t.match(p.status(c), { status: 'inboxed', flow_seq: Number });
  t.same(p.state.counters.usage, { s1: 2 });
  // An unscoped invocation is never counted, even under `*`.
  p.apply(rules(2, [['s1', 2], ['*', 1]]));
  t.same(kinds(p.apply(invoke(InvocationId.random(scopePartitionKey('s1'))))), ['start'], 'unscoped runs');
  const done = completeWith(p, a, 'a');
  t.same(started(done), [c.text], 'the waiter took the freed slot in the same fold');
  t.match(p.status(c), { status: 'running', epoch: 0 });
  t.equal(p.status(c).flow_seq, undefined);
  t.same(p.state.counters.usage, { s1: 2 });
  t.equal(p.state.flow.queues.size, 0);
});

t.test('limit-key levels: a per-tenant rule, and the scope rule above it', async (t) => {
  const p = partition();
  p.apply(rules(1, [['s1', 3], ['s1/*', 1]]));
  const t1 = [scopedId('s1'), scopedId('s1')];
  const t2 = [scopedId('s1'), scopedId('s1')];
  t.same(kinds(p.apply(scoped(t1[0], 's1', 't1'))), ['start']);
  t.same(kinds(p.apply(scoped(t1[1], 's1', 't1'))), [], 't1 is at its limit of 1');
  t.same(kinds(p.apply(scoped(t2[0], 's1', 't2/u1'))), ['start'], 't2 has room');
  t.same(kinds(p.apply(scoped(t2[1], 's1', 't2/u2'))), [], 't2 (counted over its users) is at 1');
  t.same(p.state.counters.usage, { s1: 2, 's1/t1': 1, 's1/t2': 1, 's1/t2/u1': 1 });
  // An exact rule beats the wildcard: t3 may run 2.
  p.apply(rules(2, [['s1', 3], ['s1/*', 1], ['s1/t3', 2]]));
  const t3 = [scopedId('s1'), scopedId('s1')];
  t.same(kinds(p.apply(scoped(t3[0], 's1', 't3'))), ['start']);
  t.same(kinds(p.apply(scoped(t3[1], 's1', 't3'))), [], 'the scope (3) is full');
  // Raising the scope limit lets the waiters whose own level has room run at once.
  const raised = p.apply(rules(3, [['s1', 10], ['s1/*', 1], ['s1/t3', 2]]));
  t.same(started(raised), [t3[1].text], 'only t3 had room at its level');
  // Disabling the per-tenant rule frees the rest.
  const disabled = p.apply(rules(4, [['s1', 10], ['s1/*', 1, true], ['s1/t3', 2]]));
  t.same(started(disabled).sort(), [t1[1].text, t2[1].text].sort());
  // An older book (a node that was behind) changes nothing.
  t.same(kinds(p.apply(rules(2, []))), []);
  t.equal(p.state.flow.rules.book.version, 4);
});

t.test('fair between limit keys: the tenant with fewer running goes first, FIFO within one', async (t) => {
  const p = partition();
  p.apply(rules(1, [['s', 1]]));
  const first = scopedId('s');
  p.apply(scoped(first, 's', 'busy'));
  const busy = Array.from({ length: 5 }, () => scopedId('s'));
  for (const id of busy) p.apply(scoped(id, 's', 'busy'));
  const quiet = scopedId('s');
  p.apply(scoped(quiet, 's', 'quiet'));
  // busy has 5 waiting, quiet 1 that arrived last: they take turns, quiet is not behind all of busy's.
  t.same(started(completeWith(p, first, 0)), [busy[0].text], 'both queues start even: the earlier head');
  t.same(started(completeWith(p, busy[0], 0)), [quiet.text], 'the quiet tenant is next, not sixth');
  t.same(started(completeWith(p, quiet, 0)), [busy[1].text], 'then the busy one, in order');
  t.same(started(completeWith(p, busy[1], 0)), [busy[2].text]);
  t.same(p.state.counters.tags, { s: 2, 's:busy': 3 }, 'only the queue still waiting has a tag');
});

t.test('suspension frees the slot; the resumed one waits for a slot again', async (t) => {
  const p = partition();
  p.apply(rules(1, [['s', 1]]));
  const [a, b] = [scopedId('s'), scopedId('s')];
  p.apply(scoped(a, 's'));
  p.apply(scoped(b, 's'));
  const suspended = p.apply(ended(a, 0, Outcome.SUSPENDED, { waiting_signals: [17] }));
  t.same(started(suspended), [b.text], 'a suspends: b takes its slot');
  t.equal(p.status(a).status, 'suspended');
  // The signal a waits for arrives while b runs: a waits in the queue (it ran before: epoch goes up when it starts).
  p.apply({ kind: 'signal', signal: { invocation_id: a.bytes, idx: 17, void: true } });
  t.equal(p.status(a).status, 'inboxed');
  const next = completeWith(p, b, 'b');
  t.same(find(next, 'start'), [{ kind: 'start', id: a.text, epoch: 1 }]);
});

t.test('cancel and kill of a waiter take it out of its queue', async (t) => {
  const p = partition();
  p.apply(rules(1, [['s', 1]]));
  const [a, b, c] = [scopedId('s'), scopedId('s'), scopedId('s')];
  p.apply(scoped(a, 's'));
  p.apply(scoped(b, 's'));
  p.apply(scoped(c, 's'));
  p.apply({ kind: 'manage', manage: { invocation_id: b.bytes, action: ManageAction.CANCEL } });
  t.match(p.status(b), { status: 'completed', result: { failure: { message: 'canceled' } } });
  p.apply({ kind: 'manage', manage: { invocation_id: c.bytes, action: ManageAction.KILL } });
  t.equal(p.status(c).status, 'completed');
  t.equal(p.state.flow.queues.size, 0, 'no queue left');
  t.same(kinds(completeWith(p, a, 'a')), ['completed'], 'nothing left to start');
  t.same(p.state.counters.usage, {});
});

t.test('the counters, queues and rules come back from the store', async (t) => {
  const p = partition(3);
  p.apply(rules(7, [['s', 1]]));
  const [a, b] = [scopedId('s'), scopedId('s')];
  p.apply(scoped(a, 's', 'k'));
  p.apply(scoped(b, 's', 'k'));
  // The fixture's writes into a real store, then a load as at a restart.
  const dir = mkdtempSync(path.join(os.tmpdir(), 'keel-fold-flow-'));
  const db = await openWorkerStore(dir);
  t.teardown(async () => { await db.close(); rmSync(dir, { recursive: true, force: true }); });
  await db.batch([...p.store].map(([key, value]) => ({ type: 'put', key, value })));
  const loaded = await loadState(db, 3);
  t.equal(loaded.flow.rules.book.version, 7);
  t.same(loaded.counters.usage, { s: 1, 's/k': 1 });
  t.same([...loaded.flow.queues.get('s').get('k')].map((e) => e.id), [b.text]);
});

t.test('a rate limit spaces starts evenly; a head waiting only for its rate gets a FLOW timer', async (t) => {
  const p = partition();
  const at0 = p.now + 1000;
  p.apply({ kind: 'limit_rules', limit_rules: { version: 1, rules: [{ pattern: 'r', concurrency: 0, disabled: false, version: 1, rate_starts: 2, rate_interval_ms: 1000 }] } }, at0);
  const [a, b, c] = [scopedId('r'), scopedId('r'), scopedId('r')];
  t.same(started(p.apply(scoped(a, 'r'), at0 + 1)), [a.text], 'the first starts at once');
  const queued = p.apply(scoped(b, 'r'), at0 + 2);
  t.same(started(queued), [], 'the second waits for its rate (2 per second: one each 500 ms)');
  const timers = find(queued, 'timer');
  t.equal(timers.length, 1);
  t.match(timers[0].timer, { id: b.text, wake_up_ms: at0 + 501, kind: 2 });
  t.same(started(p.apply(scoped(c, 'r'), at0 + 3)), []);
  t.same(find(p.apply(scoped(scopedId('r'), 'r'), at0 + 4), 'timer'), [], 'no second timer while one is pending');
  // Completing a frees no rate: nothing starts before the timer.
  t.same(started(completeWith(p, a, 'a')), []);
  const woke = p.apply({ kind: 'timer_fired', timer_fired: { invocation_id: b.bytes, completion_id: 0, wake_up_ms: at0 + 501, kind: 2 } }, at0 + 501);
  t.same(started(woke), [b.text], 'the timer starts the head');
  t.match(find(woke, 'timer')[0]?.timer, { wake_up_ms: at0 + 1001, kind: 2 }, 'and sets the next wake-up');
  t.same(p.state.counters.rate, { r: at0 + 1001 });
  t.equal(p.status(b).epoch, 0, 'a first start keeps epoch 0');
});

t.test('priorities: a higher one goes ahead in its queue and across queues; the store keeps the order', async (t) => {
  const p = partition(5);
  p.apply(rules(1, [['s', 1]]));
  const holder = scopedId('s');
  p.apply(scoped(holder, 's'));
  const low = [scopedId('s'), scopedId('s')];
  for (const id of low) p.apply(scoped(id, 's', 'a'));
  const other = scopedId('s');
  p.apply(scoped(other, 's', 'b', { priority: 5 }));
  const high = scopedId('s');
  p.apply(scoped(high, 's', 'a', { priority: 9 }));
  t.same(p.state.flow.queues.get('s').get('a').map((e) => e.id), [high.text, ...low.map((i) => i.text)], 'the 9 is at the head of its queue');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'keel-fold-prio-'));
  const db = await openWorkerStore(dir);
  t.teardown(async () => { await db.close(); rmSync(dir, { recursive: true, force: true }); });
  await db.batch([...p.store].map(([key, value]) => ({ type: 'put', key, value })));
  const loaded = await loadState(db, 5);
  t.same(loaded.flow.queues.get('s').get('a').map((e) => [e.id, e.priority]), [[high.text, 9], [low[0].text, 0], [low[1].text, 0]], 'reloaded in the same order');
  t.same(started(completeWith(p, holder, 0)), [high.text], 'the 9 first');
  t.same(started(completeWith(p, high, 0)), [other.text], 'then the 5 of the other queue');
  t.same(started(completeWith(p, other, 0)), [low[0].text], 'then the 0s, in order');
});

t.test('a paused queue holds its invocations with slots free; resumed, they start', async (t) => {
  const p = partition();
  p.apply(rules(1, [['s', 10]]));
  p.apply({ kind: 'flow_queue', flow_queue: { scope: 's', limit_key: 'k', paused: true } });
  const [a, b] = [scopedId('s'), scopedId('s')];
  t.same(started(p.apply(scoped(a, 's', 'k'))), [], 'paused: it waits though the scope has room');
  t.same(started(p.apply(scoped(b, 's', 'other'))), [b.text], 'another queue of the scope runs');
  t.same(p.state.flow.queueRows().map((q) => [q.limit_key, q.paused, q.waiting]), [['k', true, 1]]);
  t.same(started(p.apply({ kind: 'flow_queue', flow_queue: { scope: 's', limit_key: 'k', paused: false } })), [a.text], 'resumed: it starts in the same fold');
  t.same(p.state.counters.paused, {});
});

t.test('object and promise keys of a scope: apart from the unscoped ones, and read back whole', async (t) => {
  const { objectKeyOf, splitObjectKey } = await import('../dist/storage/keys.js');
  const { promiseKeyOf, splitPromiseKey } = await import('../dist/storage/tables/promises.js');
  const cases = [['Counter', 'k1', undefined], ['Counter', 'k1', 's1'], ['Co:unter', 'a/b:c', 's.2-x'], ['Counter', '', 's1']];
  for (const [service, key, scope] of cases) {
    const ok = objectKeyOf(service, key, scope);
    t.same(splitObjectKey(ok), { service, key, ...(scope ? { scope } : {}) }, `object key ${ok}`);
    t.same(splitPromiseKey(promiseKeyOf(service, key, 'p/1', scope)), { service, key, name: 'p/1', ...(scope ? { scope } : {}) });
  }
  // A scoped key starts with ':', which URI encoding never leaves in a service name: no unscoped key is one, or a prefix of one.
  const unscoped = objectKeyOf(':s1', 'k');
  t.not(unscoped.startsWith(':'), true, `an unscoped service named ':s1' is ${unscoped}`);
  t.not(objectKeyOf('Counter', 'k1', 's1'), objectKeyOf('Counter', 'k1'));
  t.equal(objectKeyOf('Counter', 'k1', 's1').startsWith(`${objectKeyOf('Counter', 'k1')}/`), false);
});

t.test('a rule change: a counter no longer rate-limited forgets its next start; a backlog of 0 refuses only what would wait', async (t) => {
  const p = partition();
  const at0 = p.now + 1000;
  const hourly = { pattern: 'r', concurrency: 0, disabled: false, version: 1, rate_starts: 1, rate_interval_ms: 3_600_000 };
  p.apply({ kind: 'limit_rules', limit_rules: { version: 1, rules: [hourly] } }, at0);
  const [a, b] = [scopedId('r'), scopedId('r')];
  p.apply(scoped(a, 'r'), at0 + 1);
  t.same(started(p.apply(scoped(b, 'r'), at0 + 2)), [], 'the second waits an hour');
  const fast = p.apply({ kind: 'limit_rules', limit_rules: { version: 2, rules: [{ ...hourly, version: 2, rate_interval_ms: 1000 }] } }, at0 + 3);
  t.same(started(fast), [], 'still one spacing (1 s) at most');
  t.ok(p.state.counters.rate.r <= at0 + 3 + 1000, `the next start moved to within 1 s (${p.state.counters.rate.r - at0})`);
  const gone = p.apply({ kind: 'limit_rules', limit_rules: { version: 3, rules: [] } }, at0 + 4);
  t.same(started(gone), [b.text], 'the rule deleted: the waiter starts');
  t.same(p.state.counters.rate, {}, 'and the rate entry is gone');
  p.apply({ kind: 'limit_rules', limit_rules: { version: 4, rules: [{ pattern: 'z', concurrency: 1, disabled: false, version: 4, backlog: 0 }] } }, at0 + 5);
  t.equal(p.state.flow.backlogFull('z', '', at0 + 5), undefined, 'backlog 0 with a free slot: accepted');
  p.apply(scoped(scopedId('z'), 'z'), at0 + 6);
  t.match(p.state.flow.backlogFull('z', '', at0 + 6), { pattern: 'z', waiting: 0, backlog: 0 }, 'backlog 0 with the slot taken: refused');
});

t.test('a queue\'s meta (sys_vqueue_meta): suspended, paused and finished counted as statuses change, times from the log', async (t) => {
  const p = partition();
  const [a, b] = [scopedId('m1'), scopedId('m1')];
  p.apply(scoped(a, 'm1', 'lk'), 2_000_000);
  p.apply(scoped(b, 'm1', 'lk'), 2_000_010);
  t.match(p.state.queueMeta('m1', 'lk'), { created_at_ms: 2_000_000, suspended: 0, paused: 0, finished: 0, last_start_at_ms: 2_000_010, last_attempt_at_ms: 2_000_010 });
  p.apply(ended(a, 0, Outcome.SUSPENDED, { waiting_completions: [1] }), 2_000_020);
  t.match(p.state.queueMeta('m1', 'lk'), { suspended: 1 }, 'a suspended');
  p.apply({ kind: 'manage', manage: { invocation_id: a.bytes, action: ManageAction.PAUSE } }, 2_000_030);
  t.match(p.state.queueMeta('m1', 'lk'), { suspended: 0, paused: 1 }, 'then paused');
  p.apply({ kind: 'manage', manage: { invocation_id: a.bytes, action: ManageAction.RESUME } }, 2_000_040);
  t.match(p.state.queueMeta('m1', 'lk'), { paused: 0, last_start_at_ms: 2_000_010, last_attempt_at_ms: 2_000_040 }, 'resumed: an attempt, not a start');
  completeWith(p, b, 'b');
  t.match(p.state.queueMeta('m1', 'lk'), { finished: 1, last_finish_at_ms: p.now }, 'b finished');
  t.equal(p.state.queueMeta('m1', ''), undefined, 'another queue of the scope: nothing');
  t.equal(p.state.queueMeta('other', 'lk'), undefined);
});

t.test("a queue's moving averages (sys_vqueue_meta's avg_*), sampled as Restate samples them", async (t) => {
  const p = partition();
  const T = p.now + 1000;
  const endAt = (id, at, outcome, fields) => endAttempt(p, id, at, outcome, fields);
  p.apply(rules(1, [['av', 1]]), T);
  const [a, b, c] = [scopedId('av'), scopedId('av'), scopedId('av')];
  p.apply(scoped(a, 'av'), T); // starts at once: 0 in the inbox, 0 waited
  p.apply(scoped(b, 'av'), T + 10); // waits for a's slot
  t.match(p.state.queueMeta('av', '').avg_ms, { inbox: 0, queue: 0, blocked_on_concurrency_rules: 0, blocked_on_lock: 0 });
  endAt(a, T + 210); // a ran 210 ms; b waited 200 ms (an average at 0 takes the next sample whole)
  t.match(p.state.queueMeta('av', '').avg_ms, { run: 210, end_to_end: 210, inbox: 200, queue: 200, blocked_on_concurrency_rules: 200, blocked_on_lock: 0 });
  endAt(b, T + 310); // ran 100 ms: 210 * 0.95 + 100 * 0.05 = 204.5 → 205; due to end 300 → 214.5 → 215
  t.match(p.state.queueMeta('av', '').avg_ms, { run: 205, end_to_end: 215 });
  p.apply(scoped(c, 'av'), T + 400); // at once: 200 * 0.95 → 190
  endAt(c, T + 450, Outcome.SUSPENDED, { waiting_signals: [17] }); // ran 50: 205 * 0.95 + 2.5 → 198
  p.apply({ kind: 'signal', signal: { invocation_id: c.bytes, idx: 17, void: true } }, T + 700); // suspended 250; this attempt waited 0: 190 * 0.95 → 181
  t.same(p.state.queueMeta('av', '').avg_ms, { inbox: 190, queue: 190, run: 198, end_to_end: 215, suspension: 250, blocked_on_concurrency_rules: 181, blocked_on_lock: 0 }, 'a resumption samples what it waited for, not the first-start wait');
  t.equal(p.status(c).stage_since_ms, T + 700, 'running since its resumption');
  // A resumption that waits for a slot leaves the inbox too: an attempt, not a start.
  const d = scopedId('av');
  p.apply(scoped(d, 'av'), T + 750);
  endAt(c, T + 800, Outcome.SUSPENDED, { waiting_signals: [18] }); // d starts
  p.apply({ kind: 'signal', signal: { invocation_id: c.bytes, idx: 18, void: true } }, T + 900); // c waits for d's slot
  t.equal(p.status(c).status, 'inboxed');
  endAt(d, T + 1000);
  t.match(p.state.queueMeta('av', ''), { last_start_at_ms: T + 800, last_attempt_at_ms: T + 1000 }, "c's second attempt is not a start");
  const unscoped = InvocationId.random(scopePartitionKey('av'));
  p.apply(invoke(unscoped), T + 800);
  t.equal(p.status(unscoped).stage_since_ms, undefined, 'nothing kept for an unscoped one');
});

t.test('the log time each waited to start, by what it waited for: a concurrency slot, a rate, its key lock (sys_vqueue_entry_status)', async (t) => {
  const p = partition();
  const at0 = p.now + 1000;
  const endAt = (id, at, outcome, fields) => endAttempt(p, id, at, outcome, fields);
  p.apply(rules(1, [['s', 1]]), at0);
  const [a, b] = [scopedId('s'), scopedId('s')];
  p.apply(scoped(a, 's'), at0);
  p.apply(scoped(b, 's'), at0 + 10);
  t.equal(p.status(b).waits_on, 'concurrency_rules', 'b waits for a slot');
  t.same(started(endAt(a, at0 + 260)), [b.text]);
  t.same(p.status(b).blocked_ms, { attempt: 0, latest: { concurrency_rules: 250 }, total: { concurrency_rules: 250 } }, 'b waited 250 ms for its first attempt');
  t.equal(p.status(b).waits_on, undefined);
  // b suspends while another takes the slot; resumed, it waits again: its second attempt's wait is its own.
  const c = scopedId('s');
  p.apply(scoped(c, 's'), at0 + 300);
  t.same(started(endAt(b, at0 + 400, Outcome.SUSPENDED, { waiting_signals: [17] })), [c.text]);
  p.apply({ kind: 'signal', signal: { invocation_id: b.bytes, idx: 17, void: true } }, at0 + 500);
  t.same(started(endAt(c, at0 + 600)), [b.text]);
  t.same(p.status(b).blocked_ms, { attempt: 1, latest: { concurrency_rules: 100 }, total: { concurrency_rules: 350 } }, 'the second attempt waited 100 ms; 350 in all');

  // A rate: the second start of `r` waits 500 ms for it.
  p.apply({ kind: 'limit_rules', limit_rules: { version: 2, rules: [{ pattern: 'r', concurrency: 0, disabled: false, version: 2, rate_starts: 2, rate_interval_ms: 1000 }] } }, at0 + 1000);
  const [r1, r2] = [scopedId('r'), scopedId('r')];
  p.apply(scoped(r1, 'r'), at0 + 1001);
  p.apply(scoped(r2, 'r'), at0 + 1002);
  t.equal(p.status(r2).waits_on, 'throttling_rules');
  const woke = p.apply({ kind: 'timer_fired', timer_fired: { invocation_id: r2.bytes, completion_id: 0, wake_up_ms: at0 + 1501, kind: 2 } }, at0 + 1501);
  t.same(started(woke), [r2.text]);
  t.same(p.status(r2).blocked_ms.total, { throttling_rules: 499 });

  // A scoped object's exclusive handler waits for its key's lock.
  const [o1, o2] = [scopedId('so'), scopedId('so')];
  p.apply(objectInvoke(o1, 'k', { scope: 'so' }), at0 + 2000);
  p.apply(objectInvoke(o2, 'k', { scope: 'so' }), at0 + 2005);
  t.equal(p.status(o2).waits_on, 'lock');
  t.same(started(endAt(o1, at0 + 2080)), [o2.text]);
  t.same(p.status(o2).blocked_ms, { attempt: 0, latest: { lock: 75 }, total: { lock: 75 } }, 'o2 waited 75 ms for the lock');
  t.equal(p.status(o1).blocked_ms, undefined, 'one that never waited has nothing counted');
  t.same([p.status(o1).starts, p.status(b).starts], [1, 2], 'attempts started, counted');
  // Unscoped invocations are never shown in these tables: their waits cost nothing.
  const [u1, u2] = [objectId('Obj', 'u'), objectId('Obj', 'u')];
  p.apply(objectInvoke(u1, 'u'), at0 + 3000);
  p.apply(objectInvoke(u2, 'u'), at0 + 3001);
  endAt(u1, at0 + 3050);
  t.same([p.status(u2).waits_on, p.status(u2).blocked_ms, p.status(u2).starts], [undefined, undefined, undefined], 'nothing recorded for an unscoped one');
});

t.test('a paused queue: its waiters stop counting while it is paused, and count again once resumed', async (t) => {
  const p = partition();
  const at0 = p.now + 1000;
  p.apply(rules(1, [['q', 1]]), at0);
  const [a, b] = [scopedId('q'), scopedId('q')];
  p.apply(scoped(a, 'q', 't'), at0);
  p.apply(scoped(b, 'q', 't'), at0 + 100);
  t.match(p.status(b), { waits_on: 'concurrency_rules', wait_since_ms: at0 + 100 });
  p.apply({ kind: 'flow_queue', flow_queue: { scope: 'q', limit_key: 't', paused: true } }, at0 + 200);
  t.same([p.status(b).waits_on, p.status(b).blocked_ms.total], [undefined, { concurrency_rules: 100 }], 'paused: the 100 ms before counted, nothing now');
  p.apply({ kind: 'flow_queue', flow_queue: { scope: 'q', limit_key: 't', paused: false } }, at0 + 700);
  t.match(p.status(b), { waits_on: 'concurrency_rules', wait_since_ms: at0 + 700 }, 'resumed: still no slot, it counts again');
  const s = p.status(a);
  p.apply(append(a, s.epoch, MessageType.OutputCommand, output('x')), at0 + 750);
  t.same(started(p.apply(ended(a, s.epoch, Outcome.END), at0 + 750)), [b.text]);
  t.same(p.status(b).blocked_ms.total, { concurrency_rules: 150 }, '100 before the pause + 50 after it, not the 500 paused');
  // A delayed scoped invocation keeps when it became due.
  const d = scopedId('q');
  p.apply(scoped(d, 'q', 'u', { execute_at_ms: at0 + 2000 }), at0 + 800);
  p.apply({ kind: 'timer_fired', timer_fired: { invocation_id: d.bytes, completion_id: 0, wake_up_ms: at0 + 2000, kind: 1 } }, at0 + 2000);
  t.equal(p.status(d).runnable_at_ms, at0 + 2000, 'first runnable when its delay ended');
});
