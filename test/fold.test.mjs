// The partition state machine, one command kind at a time, without a server: each test folds a
// few commands into a fresh partition and checks the state and the actions asked for.
import t from 'tap';
import {
  partition, serviceId, objectId, invoke, objectInvoke, append, ended, completeWith, output, kinds, find, outbox, outboxEntries, lastNotification,
  MessageType, Outcome, Then, TimerKind, ManageAction, encode, decode, pb, InvocationId,
} from './helpers/fold.mjs';
import { idOfKeyText } from '../dist/storage/keys.js';

t.test('invoke: a new invocation journals its input and starts', async (t) => {
  const p = partition();
  const id = serviceId();
  const actions = p.apply(invoke(id));
  t.same(actions, [{ kind: 'start', id: id.text, epoch: 0 }]);
  t.match(p.status(id), { status: 'running', epoch: 0, journal_length: 1, service: 'Svc', handler: 'h' });
  t.equal(p.journal(id)[0].type, MessageType.InputCommand);
  t.same(kinds(p.apply(invoke(id))), [], 'the same id again starts nothing');
});

t.test('invoke: exclusive handlers of one key queue in its inbox', async (t) => {
  const p = partition();
  const [a, b] = [objectId('Obj', 'k'), objectId('Obj', 'k')];
  t.same(kinds(p.apply(objectInvoke(a, 'k'))), ['start']);
  t.same(kinds(p.apply(objectInvoke(b, 'k'))), [], 'the second waits');
  t.equal(p.status(b).status, 'inboxed');
  t.same(p.state.inboxes.get('Obj/k').map((e) => e.id), [b.text]);
  const shared = objectId('Obj', 'k');
  t.same(kinds(p.apply(objectInvoke(shared, 'k', { handler_type: 'Shared' }))), ['start'], 'a shared handler never waits');
  // The first completes: the lock passes to the second.
  const done = completeWith(p, a, 'a');
  t.same(kinds(done), ['start', 'completed']);
  t.equal(find(done, 'start')[0].id, b.text);
  t.equal(p.state.lockOf('Obj/k'), b.text);
  t.equal(p.state.inboxes.has('Obj/k'), false);
});

t.test('invoke: a delayed send waits for its timer, which starts it once', async (t) => {
  const p = partition();
  const id = serviceId();
  const at = p.now + 60_000;
  const actions = p.apply(invoke(id, { execute_at_ms: at }));
  t.same(kinds(actions), ['timer']);
  t.match(p.status(id), { status: 'scheduled', execute_at_ms: at });
  const fire = { kind: 'timer_fired', timer_fired: { invocation_id: id.bytes, completion_id: 0, wake_up_ms: at, kind: TimerKind.INVOKE } };
  t.same(kinds(p.apply(fire, at)), ['start']);
  t.equal(p.status(id).status, 'running');
  t.same(p.apply(fire, at + 1), [], 'a timer fires once');
});

t.test('journal_append: only the live attempt records; a broken rule is rejected (RT0017)', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id));
  t.same(p.apply(append(id, 7, MessageType.OutputCommand, output('stale'))), [], 'another epoch is dropped');
  t.equal(p.status(id).journal_length, 1);
  // State on a plain Service breaks a rule: nothing is journalled, the epoch moves on.
  const set = encode(pb.SetState, { key: Buffer.from('k'), value: { content: Buffer.from('1') } });
  const actions = p.apply(append(id, 0, MessageType.SetStateCommand, set));
  t.match(actions, [{ kind: 'reject', id: id.text, epoch: 1, error_code: 'RT0017', entry_index: 1 }]);
  t.match(p.status(id), { epoch: 1, journal_length: 1 });
});

t.test('journal_append: state, sleeps, calls and run completions', async (t) => {
  const p = partition();
  const id = objectId('Obj', 'k');
  p.apply(objectInvoke(id, 'k'));
  p.apply(append(id, 0, MessageType.SetStateCommand, encode(pb.SetState, { key: Buffer.from('count'), value: { content: Buffer.from('5') } })));
  t.equal(p.state.stateOf('Obj/k').get(Buffer.from('count').toString('base64url')).toString(), '5');

  const wake = p.now + 1000;
  const sleep = p.apply(append(id, 0, MessageType.SleepCommand, encode(pb.Sleep, { wake_up_time: wake, result_completion_id: 1 })));
  t.match(sleep, [{ kind: 'timer', timer: { id: id.text, completion_id: 1, wake_up_ms: wake, kind: TimerKind.SLEEP } }]);

  const child = serviceId();
  const call = encode(pb.Call, { service_name: 'Other', handler_name: 'h', parameter: Buffer.from('{}'), invocation_id_notification_idx: 2, result_completion_id: 3 });
  const called = p.apply(append(id, 0, MessageType.CallCommand, call, { child_invocation_id: child.bytes, child_service_type: 'Service' }));
  t.same(kinds(called), ['forward', 'outbox'], 'the child id goes to the attempt, the invoke to the outbox');
  t.match(outbox(p)[0], { target: child.text, kind: 'invoke', invoke: { service: 'Other', caller_completion_id: 3 } });
  t.same(p.status(id).children, [child.text]);

  const run = encode(pb.Notification, { completion_id: 4, value: { content: Buffer.from('"r"') } });
  const acked = p.apply(append(id, 0, MessageType.RunCompletion, run, { requested_ack: true }));
  t.match(acked, [{ kind: 'forward', type: MessageType.ProposeRunCompletionAck }], 'v7 asks for an ack instead of the notification');
});

t.test('attempt_ended: end, suspension, failure with retry, pause or fail', async (t) => {
  const p = partition();
  const a = serviceId();
  p.apply(invoke(a));
  t.same(kinds(completeWith(p, a, 'ok')), ['completed']);
  t.match(p.status(a), { status: 'completed', result: { value: Buffer.from('"ok"').toString('base64') } });
  t.same(p.journal(a), [], 'a completed journal leaves memory (the store keeps it)');

  const b = serviceId();
  p.apply(invoke(b));
  t.same(p.apply(ended(b, 0, Outcome.SUSPENDED, { waiting_completions: [1] })), []);
  t.match(p.status(b), { status: 'suspended', waiting: { completions: [1] } });

  const c = serviceId();
  p.apply(invoke(c));
  const retry_at = p.now + 500;
  const failed = p.apply(ended(c, 0, Outcome.FAILED, { error_code: 'RT0007', failure_code: 500, failure_message: 'boom', retry_at_ms: retry_at, then: Then.RETRY }));
  t.same(failed, [{ kind: 'retry', id: c.text, epoch: 0, at_ms: retry_at }]);
  t.match(p.status(c), { status: 'backing-off', retry_count: 1, last_failure: { error_code: 'RT0007', message: 'boom' } });

  const d = serviceId();
  p.apply(invoke(d));
  p.apply(ended(d, 0, Outcome.FAILED, { error_code: 'RT0007', then: Then.PAUSE }));
  t.equal(p.status(d).status, 'paused');

  const e = serviceId();
  p.apply(invoke(e));
  p.apply(ended(e, 0, Outcome.FAILED, { error_code: 'RT0007', failure_code: 500, failure_message: 'gave up', then: Then.FAIL }));
  t.match(p.status(e), { status: 'completed', result: { failure: { code: 500, message: 'gave up' } } });
});

t.test('attempt_ended: a suspension whose awaited notification already arrived resumes at once', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id));
  p.apply({ kind: 'call_result', call_result: { invocation_id: id.bytes, completion_id: 1, entry_type: MessageType.CallCompletion, value: Buffer.from('1') } });
  t.same(p.apply(ended(id, 0, Outcome.SUSPENDED, { waiting_completions: [1] })), [{ kind: 'start', id: id.text, epoch: 1 }]);
});

t.test('timer_fired: a sleep completes and resumes a suspended invocation', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id));
  const wake = p.now + 100;
  p.apply(append(id, 0, MessageType.SleepCommand, encode(pb.Sleep, { wake_up_time: wake, result_completion_id: 1 })));
  p.apply(ended(id, 0, Outcome.SUSPENDED, { waiting_completions: [1] }));
  const fire = { kind: 'timer_fired', timer_fired: { invocation_id: id.bytes, completion_id: 1, wake_up_ms: wake, kind: TimerKind.SLEEP } };
  t.same(p.apply(fire, wake), [{ kind: 'start', id: id.text, epoch: 1 }]);
  t.match(lastNotification(p, id), { type: MessageType.SleepCompletion, completion_id: 1 });
  t.same(p.apply(fire, wake + 1), [], 'fires once');
});

t.test('retry_attempt: only the epoch that backs off retries', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id));
  p.apply(ended(id, 0, Outcome.FAILED, { error_code: 'RT0007', retry_at_ms: p.now, then: Then.RETRY }));
  t.same(p.apply({ kind: 'retry_attempt', retry_attempt: { invocation_id: id.bytes, epoch: 5 } }), [], 'stale epoch');
  t.same(p.apply({ kind: 'retry_attempt', retry_attempt: { invocation_id: id.bytes, epoch: 0 } }), [{ kind: 'start', id: id.text, epoch: 1 }]);
});

t.test("retries since the last command: a new command starts the count again, a run's completion does not", async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id));
  const fail = (epoch) => {
    p.apply(ended(id, epoch, Outcome.FAILED, { error_code: 'RT0007', retry_at_ms: p.now, then: Then.RETRY }));
    p.apply({ kind: 'retry_attempt', retry_attempt: { invocation_id: id.bytes, epoch } });
  };
  p.apply(append(id, 0, MessageType.RunCommand, encode(pb.Run, { result_completion_id: 1, name: 'first' })));
  t.match(p.status(id), { retries_since_command: 0, command_at_ms: p.now });
  fail(0);
  fail(1);
  t.match(p.status(id), { retry_count: 2, retries_since_command: 2 });
  p.apply(append(id, 2, MessageType.RunCompletion, encode(pb.Notification, { completion_id: 1, value: { content: Buffer.from('1') } })));
  t.equal(p.status(id).retries_since_command, 2, 'a completion is not a new command');
  p.apply(append(id, 2, MessageType.RunCommand, encode(pb.Run, { result_completion_id: 2, name: 'second' })));
  t.match(p.status(id), { retry_count: 2, retries_since_command: 0 }, 'the next step starts from none; the invocation keeps its total');
  fail(2);
  t.match(p.status(id), { retry_count: 3, retries_since_command: 1 });
  p.apply(ended(id, 3, Outcome.FAILED, { error_code: 'RT0011', retry_at_ms: p.now, then: Then.RETRY }));
  t.match(p.status(id), { retry_count: 4, retries_since_command: 1 }, 'an attempt that never reached the endpoint (RT0011) tried no step');
});

t.test('call_result: forwarded to the live attempt, journalled as a notification', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id));
  const actions = p.apply({ kind: 'call_result', call_result: { invocation_id: id.bytes, completion_id: 2, entry_type: MessageType.CallCompletion, failure: { code: 409, message: 'no' } } });
  t.match(actions, [{ kind: 'forward', id: id.text, type: MessageType.CallCompletion }]);
  t.match(lastNotification(p, id), { completion_id: 2, failure: { code: 409, message: 'no' } });
});

t.test('signal: CANCEL completes what has not started; named signals are delivered', async (t) => {
  const p = partition();
  const [a, b] = [objectId('Obj', 'k'), objectId('Obj', 'k')];
  p.apply(objectInvoke(a, 'k'));
  p.apply(objectInvoke(b, 'k'));
  p.apply({ kind: 'signal', signal: { invocation_id: b.bytes, idx: 1, void: true } });
  t.match(p.status(b), { status: 'completed', result: { failure: { code: 409, message: 'canceled' } } });
  t.equal(p.state.inboxes.has('Obj/k'), false, 'it left the inbox');
  const named = p.apply({ kind: 'signal', signal: { invocation_id: a.bytes, name: 'go', value: Buffer.from('1') } });
  t.match(named, [{ kind: 'forward', type: MessageType.SignalNotification }]);
  t.match(lastNotification(p, a), { signal_name: 'go' });
});

t.test('outbox_delivered: the entry leaves the outbox', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id, { caller_invocation_id: serviceId().bytes, caller_completion_id: 1 }));
  completeWith(p, id, 'r');
  const [entry] = outboxEntries(p);
  t.ok(entry, 'the result for the caller is in the outbox');
  t.equal(p.state.counters.outbox, 1, 'counted');
  p.apply({ kind: 'outbox_delivered', outbox_delivered: { seq: entry.seq } });
  t.same(outboxEntries(p), []);
  t.equal(p.state.counters.outbox, 0);
  p.apply({ kind: 'outbox_delivered', outbox_delivered: { seq: entry.seq } });
  t.equal(p.state.counters.outbox, 0, 'a repeated acknowledgement (after a resend) counts nothing');
});

t.test('manage: kill cascades to children; pause and resume', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id));
  const child = serviceId();
  p.apply(append(id, 0, MessageType.CallCommand, encode(pb.Call, { service_name: 'C', handler_name: 'h', invocation_id_notification_idx: 1, result_completion_id: 2 }), { child_invocation_id: child.bytes }));
  const before = outbox(p).length;
  const killed = p.apply({ kind: 'manage', manage: { invocation_id: id.bytes, action: ManageAction.KILL } });
  t.same(kinds(killed), ['abort', 'outbox', 'completed']);
  t.match(outbox(p)[before], { target: child.text, kind: 'manage', manage: { action: ManageAction.KILL } });
  t.match(p.status(id).result, { failure: { code: 409, message: 'killed' } });

  const q = serviceId();
  p.apply(invoke(q));
  t.same(kinds(p.apply({ kind: 'manage', manage: { invocation_id: q.bytes, action: ManageAction.PAUSE } })), ['abort']);
  t.match(p.status(q), { status: 'paused', epoch: 1 });
  t.same(p.apply({ kind: 'manage', manage: { invocation_id: q.bytes, action: ManageAction.RESUME } }), [{ kind: 'start', id: q.text, epoch: 2 }]);
});

t.test('purge: only completed invocations, wholly or their journal', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id));
  p.apply({ kind: 'purge', purge: { invocation_id: id.bytes } });
  t.equal(p.status(id).status, 'running', 'a running invocation is not purged');
  completeWith(p, id, 'x');
  p.apply({ kind: 'purge', purge: { invocation_id: id.bytes, journal_only: true } });
  t.match(p.status(id), { status: 'completed', journal_length: 0 });
  p.apply({ kind: 'purge', purge: { invocation_id: id.bytes } });
  t.equal(p.status(id), undefined);
  t.same([...p.store.keys()].filter((k) => k.includes(id.text)), [], 'nothing of it stays in the store');
});

t.test('attach: the result now when completed, later when running; output does not wait', async (t) => {
  const p = partition();
  const target = serviceId();
  const waiter = serviceId();
  p.apply(invoke(target));
  const attach = (entry_type) => ({ kind: 'attach', attach: { invocation_id: target.bytes, waiter_invocation_id: waiter.bytes, waiter_completion_id: 1, entry_type } });
  p.apply(attach(MessageType.GetInvocationOutputCompletion));
  t.match(outbox(p).at(-1), { target: waiter.text, kind: 'call_result', call_result: { void: true } }, 'output of a running invocation: not ready');
  p.apply(attach(MessageType.AttachInvocationCompletion));
  t.same(p.status(target).attachers, [{ id: waiter.text, completion_id: 1, entry_type: MessageType.AttachInvocationCompletion }]);
  completeWith(p, target, 'done');
  t.match(outbox(p).at(-1), { target: waiter.text, kind: 'call_result', call_result: { value: Buffer.from('"done"') } });
});

t.test('commands from another partition apply once, however often they are redelivered', async (t) => {
  const p = partition();
  const id = serviceId();
  const cmd = { ...invoke(id), source_partition: 3, source_seq: 9 };
  t.same(kinds(p.apply(cmd)), ['start']);
  p.apply({ kind: 'purge', purge: { invocation_id: id.bytes } });
  completeWith(p, id, 1);
  p.apply({ kind: 'purge', purge: { invocation_id: id.bytes } });
  t.same(p.apply(cmd), [], 'the redelivered invoke is dropped');
  t.equal(p.state.dedup.get(3), 9);
});

t.test('a broken invariant throws instead of writing half a change', async (t) => {
  const p = partition();
  t.throws(() => p.apply({ kind: 'manage', manage: { action: ManageAction.KILL } }), { name: 'InvariantError' }, 'a command without an invocation id');
  t.throws(() => p.apply({ kind: 'no_such_kind' }), { name: 'InvariantError' }, 'an unknown command kind');
  const id = InvocationId.random(1n);
  p.apply(invoke(id));
  p.state.journals.get(id.text).push({ type: MessageType.InputCommand, payload: Buffer.alloc(0) });
  t.throws(() => p.apply(append(id, 0, MessageType.OutputCommand, output(1))), { name: 'InvariantError' }, 'a journal longer than its status says');
});

/** A `subscription_records` command for a plain service sink, records at `offsets`. */
function records(offsets, { local = true, sub = 'sub_1aaaaaaaaaaaaaaaaaaaaaa', ids = new Map(), ...fields } = {}) {
  return {
    kind: 'subscription_records',
    subscription_records: {
      subscription_id: sub,
      topic: 'orders',
      kafka_partition: 2,
      service: 'Svc',
      handler: 'h',
      service_type: 'Service',
      handler_type: '',
      records: offsets.map((offset) => {
        if (!ids.has(offset)) ids.set(offset, serviceId());
        return { offset, invocation_id: ids.get(offset).bytes, input: Buffer.from(`"r${offset}"`), headers: [{ key: 'kafka.offset', value: String(offset) }], local };
      }),
      ...fields,
    },
  };
}

t.test('subscription_records: each record becomes one invocation and the position moves past it, in one batch', async (t) => {
  const p = partition();
  const ids = new Map();
  const actions = p.apply(records([5, 6, 8], { ids }));
  t.same(kinds(actions), ['start', 'start', 'start']);
  t.match(p.state.subscriptionPosition('sub_1aaaaaaaaaaaaaaaaaaaaaa', 'orders', 2), { next_offset: 9, delivered: 3, skipped: 0 });
  t.match(p.status(ids.get(6)), { status: 'running', service: 'Svc', invoked_by_subscription_id: 'sub_1aaaaaaaaaaaaaaaaaaaaaa' });
  const input = decode(pb.Input, p.journal(ids.get(6))[0].payload);
  t.equal(Buffer.from(input.value.content).toString(), '"r6"');
  t.same(input.headers.map((h) => [h.key, h.value]), [['kafka.offset', '6']]);
  t.equal(p.state.subscriptionPending('sub_1aaaaaaaaaaaaaaaaaaaaaa'), 3, 'counted as pending');
  completeWith(p, ids.get(5), 'ok');
  t.equal(p.state.subscriptionPending('sub_1aaaaaaaaaaaaaaaaaaaaaa'), 2, 'a completed one is not');
  t.ok([...p.store.keys()].some((k) => k.includes('/subpos/')), 'the position is written with the batch');

  // Delivered again (a crash before Kafka knew, a rebalance): only what is new counts.
  t.same(kinds(p.apply(records([5, 6, 8], { ids }))), [], 'records below the position are dropped');
  t.same(kinds(p.apply(records([8, 9, 10], { ids }))), ['start', 'start'], 'an overlapping chunk makes only the new ones');
  t.match(p.state.subscriptionPosition('sub_1aaaaaaaaaaaaaaaaaaaaaa', 'orders', 2), { next_offset: 11, delivered: 5 });
  t.throws(() => p.apply(records([12, 11])), { name: 'InvariantError' }, 'offsets must ascend');
});

t.test('subscription_records: invocations of other partitions go through the outbox, in record order; skipped records only move the position', async (t) => {
  const p = partition();
  const ids = new Map();
  const cmd = records([1, 2, 3], { local: false, ids });
  cmd.subscription_records.records[1] = { offset: 2, skipped: 'the record key is not valid UTF-8' };
  const actions = p.apply(cmd);
  t.same(kinds(actions), ['outbox', 'outbox']);
  t.same(outbox(p).map((e) => [e.target, e.kind, e.invoke.invoked_by_subscription_id]), [
    [ids.get(1).text, 'invoke', 'sub_1aaaaaaaaaaaaaaaaaaaaaa'],
    [ids.get(3).text, 'invoke', 'sub_1aaaaaaaaaaaaaaaaaaaaaa'],
  ]);
  t.match(p.state.subscriptionPosition('sub_1aaaaaaaaaaaaaaaaaaaaaa', 'orders', 2), { next_offset: 4, delivered: 2, skipped: 1 });
  t.equal(p.state.subscriptionPending('sub_1aaaaaaaaaaaaaaaaaaaaaa'), 0, 'counted where the invocations are made');
});

t.test('subscription_records: records of one object key run one at a time, in offset order', async (t) => {
  const p = partition();
  const ids = new Map([1, 2, 3].map((o) => [o, objectId('Obj', 'k')]));
  const cmd = records([1, 2, 3], { ids, service: 'Obj', service_type: 'VirtualObject', handler_type: 'Exclusive' });
  for (const r of cmd.subscription_records.records) r.key = 'k';
  t.same(kinds(p.apply(cmd)), ['start']);
  t.same(p.state.inboxes.get('Obj/k').map((e) => e.id), [ids.get(2).text, ids.get(3).text]);
  t.same(find(completeWith(p, ids.get(1), 1), 'start').map((a) => a.id), [ids.get(2).text]);
});

t.test('the live index holds exactly the invocations that have not completed', async (t) => {
  const p = partition();
  const [a, b] = [serviceId(), serviceId()];
  p.apply(invoke(a));
  p.apply(invoke(b));
  const liveKeys = () => [...p.store.keys()].filter((k) => k.startsWith('p0/s/live/')).map((k) => idOfKeyText(k.slice('p0/s/live/'.length))).sort();
  t.same(liveKeys(), [a.text, b.text].sort());
  completeWith(p, a, 1);
  t.same(liveKeys(), [b.text], 'a completed invocation leaves it');
  p.apply({ kind: 'manage', manage: { invocation_id: b.bytes, action: ManageAction.KILL } });
  t.same(liveKeys(), [], 'so does a killed one');
});

t.test('a completion indexes when its journal and then all of it expire; purges remove the entries', async (t) => {
  const p = partition();
  const id = serviceId();
  p.apply(invoke(id, { completion_retention_ms: 60_000, journal_retention_ms: 10_000 }));
  completeWith(p, id, 'x');
  const done = p.status(id).completed_at_ms;
  const expiry = () => [...p.store].filter(([k]) => k.startsWith('p0/s/expiry/')).map(([k, v]) => [Number(k.split('/')[3]), v.toString()]).sort((a, b) => a[0] - b[0]);
  t.same(expiry(), [[done + 10_000, 'journal'], [done + 60_000, 'all']]);
  p.apply({ kind: 'purge', purge: { invocation_id: id.bytes, journal_only: true } });
  t.same(expiry(), [[done + 60_000, 'all']], 'the journal is gone, the rest is due later');
  p.apply({ kind: 'purge', purge: { invocation_id: id.bytes } });
  t.same(expiry(), [], 'nothing left to expire');
});

t.test('complete: a completed status stays a fast object (not a hash table), its stored JSON keys in the order a delete gave', async (t) => {
  // V8's own view of the object, from a process with natives syntax, on each node at hand (the pinned
  // Node 24 that runs the tests, the system node that runs `node dist/main.js`). Completed statuses stay in
  // memory (the cache of idle statuses), and a `delete` makes an object a hash table (Node 24: any;
  // Node 20: any but the field added last): 1,000 per partition held ~11 MB of hash tables under noop load.
  const { execFileSync } = await import('node:child_process');
  const { existsSync } = await import('node:fs');
  const helpers = new URL('./helpers/fold.mjs', import.meta.url).href;
  const script = `
    import { partition, serviceId, invoke, completeWith, ended, Outcome, Then } from ${JSON.stringify(helpers)};
    import { invocationsTable } from ${JSON.stringify(new URL('../dist/storage/tables/invocations.js', import.meta.url).href)};
    const p = partition(0);
    const plain = serviceId();
    p.apply(invoke(plain));
    completeWith(p, plain, { ok: true });
    const failed = serviceId();
    p.apply(invoke(failed));
    p.apply(ended(failed, 0, Outcome.FAILED, { failure_message: 'boom', then: Then.FAIL }));
    const stored = (id) => p.store.get(invocationsTable.key(0, id.text)).toString();
    console.log(JSON.stringify([plain, failed].map((id) => ({ fast: %HasFastProperties(p.status(id)), stored: stored(id) }))));`;
  const runtimes = [process.execPath, '/usr/bin/node'].filter((n, i, all) => existsSync(n) && all.indexOf(n) === i);
  for (const node of runtimes) {
    const res = JSON.parse(execFileSync(node, ['--allow-natives-syntax', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 }));
    const version = execFileSync(node, ['--version'], { encoding: 'utf8', timeout: 30_000 }).trim();
    for (const [name, r] of [['output then end', res[0]], ['failed, not retried', res[1]]]) {
      t.equal(r.fast, true, `${version}: ${name}: fast properties`);
      const stored = JSON.parse(r.stored);
      t.equal(stored.status, 'completed');
      t.notOk('output' in stored, `${version}: ${name}: no output field stored`);
      // As when the field was deleted: the result and the completion time are the last keys.
      t.same(Object.keys(stored).slice(-2), ['result', 'completed_at_ms'], `${version}: ${name}: keys in the order a delete gave`);
    }
  }
});
