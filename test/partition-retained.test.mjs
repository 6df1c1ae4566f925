// What a partition keeps in memory does not grow with what it retains: sleeping invocations,
// their journals, the locks they hold and workflow promises stay in the store and are read back
// when a command reaches them, with the same fold as if they had stayed; counts and the restart
// index are kept in the counters so that nothing needs scanning at open.
import t from 'tap';
import { IDLE_STATUSES_IN_MEMORY, PartitionState } from '../dist/partition/state.js';
import { restartTable } from '../dist/storage/tables/restart.js';
import { fsmTable } from '../dist/storage/tables/fsm.js';
import { partition, objectId, serviceId, invoke, objectInvoke, append, ended, outboxEntries, Outcome, MessageType, TimerKind, encode, pb, lastNotification, completeWith } from './helpers/fold.mjs';

const N = IDLE_STATUSES_IN_MEMORY + 200;

/** N object invocations, one per key, each asleep (suspended) on a timer `wake` ms from now. */
function sleepers(p, wake) {
  const ids = [];
  for (let i = 0; i < N; i++) {
    const id = objectId('Obj', `k${i}`);
    p.apply(objectInvoke(id, `k${i}`));
    id.wake = p.now + wake;
    ids.push(id);
    p.apply(append(id, 0, MessageType.SleepCommand, encode(pb.Sleep, { wake_up_time: id.wake, result_completion_id: 1 })));
    p.apply(ended(id, 0, Outcome.SUSPENDED, { waiting_completions: [1] }));
  }
  return ids;
}

const counters = (p) => JSON.parse(p.store.get(fsmTable.key(0)).toString());

t.test('sleeping invocations leave memory, statuses and journals; a timer brings one back as it was', async (t) => {
  const p = partition();
  const ids = sleepers(p, 60_000);
  t.ok(p.state.invocations.size <= IDLE_STATUSES_IN_MEMORY, `statuses in memory: ${p.state.invocations.size} for ${N} sleeping`);
  t.equal(p.state.journals.size, 0, 'no journal of a sleeping invocation in memory');
  t.equal(p.state.liveInvocations(), N, 'all counted as live');
  t.same(counters(p).statuses, { suspended: N }, 'counted by status in the counters');
  t.equal([...p.store.keys()].filter((k) => k.startsWith('p0/s/restart/')).length, 0, 'none indexed to restart');

  const first = ids[0];
  t.notOk(p.state.invocations.has(first.text), 'the first sleeper left memory');
  const fire = { kind: 'timer_fired', timer_fired: { invocation_id: first.bytes, completion_id: 1, wake_up_ms: first.wake, kind: TimerKind.SLEEP } };
  t.same(p.apply(fire, first.wake), [{ kind: 'start', id: first.text, epoch: 1 }], 'it resumes');
  t.equal(p.journal(first).length, 3, 'its journal read back: input, sleep and the completion');
  t.match(lastNotification(p, first), { type: MessageType.SleepCompletion, completion_id: 1 });
  t.ok(p.store.has(restartTable.key(0, first.text)), 'indexed to restart while it runs');
  t.same(counters(p).statuses, { running: 1, suspended: N - 1 });

  // A new call to its key waits for the lock the sleeper holds: the lock is read from the store.
  const fresh = new PartitionState(0);
  fresh.loader = (key) => p.store.get(key);
  t.equal(fresh.lockOf('Obj/k0'), first.text, 'the lock, read from the store alone');
  const waiting = objectId('Obj', 'k0');
  t.same(p.apply(objectInvoke(waiting, 'k0')), [], 'queued behind the lock');
  t.equal(p.status(waiting).status, 'inboxed');
  t.same(completeWith(p, first, 1).filter((a) => a.kind === 'start'), [{ kind: 'start', id: waiting.text, epoch: 0 }], 'the lock passes to it');
  t.notOk(p.store.has(restartTable.key(0, first.text)), 'a completed invocation leaves the restart index');
  t.same(counters(p).statuses, { running: 1, suspended: N - 1 });
  t.equal(p.state.liveInvocations(), N);
});

t.test('the same commands folded with caches of one entry give the same actions and the same store', async (t) => {
  // Every command folded twice: into a partition with the default caches and into one that keeps
  // one idle status, one lock and one byte of object state, so that statuses, journals, locks,
  // promises and state are read back from the store all the time. Inboxes, timers, the outbox
  // and workflow promises are all exercised. The actions and the stores must be equal.
  const big = partition();
  const small = partition(0, 1, { idle_statuses: 1, locks: 1 });
  const apply = (cmd, at) => {
    const a = big.apply(cmd, at);
    const b = small.apply(cmd, at);
    t.same(b, a, `same actions for ${cmd.kind}`, { diagnostic: false });
    return a;
  };
  const set = (id, epoch, key, value) => apply(append(id, epoch, MessageType.SetStateCommand, encode(pb.SetState, { key: Buffer.from(key), value: { content: Buffer.from(value) } })));
  const finish = (id) => {
    const s = big.status(id);
    apply(append(id, s.epoch, MessageType.OutputCommand, encode(pb.Output, { value: { content: Buffer.from('1') } })));
    return apply(ended(id, s.epoch, Outcome.END));
  };
  // Objects: three per key on three keys (two wait in each inbox); each sets state, sleeps,
  // suspends, wakes on its timer, calls a service (through the outbox) and completes.
  const ids = [];
  for (let i = 0; i < 9; i++) {
    const id = objectId('Obj', `k${i % 3}`);
    ids.push(id);
    apply(objectInvoke(id, `k${i % 3}`));
  }
  for (let round = 0; round < 3; round++) {
    for (const id of ids.filter((x) => big.status(x).status === 'running')) {
      const s = big.status(id);
      set(id, s.epoch, 'n', `"${id.text}"`);
      const wake = big.now + 10;
      id.wake = wake;
      apply(append(id, s.epoch, MessageType.SleepCommand, encode(pb.Sleep, { wake_up_time: wake, result_completion_id: 1 })));
      apply(ended(id, s.epoch, Outcome.SUSPENDED, { waiting_completions: [1] }));
    }
    for (const id of ids.filter((x) => big.status(x).status === 'suspended')) {
      apply({ kind: 'timer_fired', timer_fired: { invocation_id: id.bytes, completion_id: 1, wake_up_ms: id.wake, kind: TimerKind.SLEEP } }, id.wake);
      const s = big.status(id);
      const child = serviceId();
      const call = encode(pb.Call, { service_name: 'Other', handler_name: 'h', parameter: Buffer.from('{}'), invocation_id_notification_idx: 2, result_completion_id: 3 });
      apply(append(id, s.epoch, MessageType.CallCommand, call, { child_invocation_id: child.bytes, child_service_type: 'Service' }));
      apply({ kind: 'call_result', call_result: { invocation_id: id.bytes, completion_id: 3, entry_type: MessageType.CallCompletion, value: Buffer.from('"c"') } });
      finish(id);
    }
  }
  t.ok(ids.every((id) => big.status(id).status === 'completed'), 'every object invocation completed, through its inbox');
  // Every outbox entry delivered, acknowledged twice (a resend).
  for (const e of outboxEntries(big)) {
    apply({ kind: 'outbox_delivered', outbox_delivered: { seq: e.seq } });
    apply({ kind: 'outbox_delivered', outbox_delivered: { seq: e.seq } });
  }
  // A workflow waits on a promise that a shared handler completes.
  const run = objectId('Wf', 'w');
  apply(invoke(run, { service: 'Wf', key: 'w', service_type: 'Workflow', handler_type: 'Workflow' }));
  apply(append(run, 0, MessageType.GetPromiseCommand, encode(pb.GetPromise, { key: 'p', result_completion_id: 1 })));
  apply(ended(run, 0, Outcome.SUSPENDED, { waiting_completions: [1] }));
  const signal = objectId('Wf', 'w');
  apply(invoke(signal, { service: 'Wf', key: 'w', handler: 'signal', service_type: 'Workflow', handler_type: 'Shared' }));
  apply(append(signal, 0, MessageType.CompletePromiseCommand, encode(pb.CompletePromise, { key: 'p', completion_value: { content: Buffer.from('"v"') }, result_completion_id: 1 })));
  finish(signal);
  t.equal(big.status(run).status, 'running', 'the promise woke the workflow run');
  finish(run);

  t.same([...small.store.keys()].sort(), [...big.store.keys()].sort(), 'the same keys');
  let differing = 0;
  for (const [k, v] of big.store) if (!small.store.get(k)?.equals(v)) differing++;
  t.equal(differing, 0, 'the same values');
  t.ok(small.state.invocations.size <= 2, `the small partition kept ${small.state.invocations.size} statuses in memory`);
});

t.test('a journal that left memory is read back through the batch being written and the one in flight', async (t) => {
  // The processor folds many commands per batch and writes one batch while folding the next: an
  // invocation that suspends (its journal leaves memory) and wakes before either batch is in the
  // store must get its journal from them, not from the store.
  const { fold } = await import('../dist/partition/fold/index.js');
  const p = partition();
  const id = objectId('Obj', 'k');
  const wake = p.now + 10;
  const run = (cmd, at = p.now + 1) => {
    const actions = [];
    fold({ state: p.state, actions, now_ms: at }, { timestamp_ms: at, ...cmd });
    return actions;
  };
  run(objectInvoke(id, 'k'));
  run(append(id, 0, MessageType.SleepCommand, encode(pb.Sleep, { wake_up_time: wake, result_completion_id: 1 })));
  run(ended(id, 0, Outcome.SUSPENDED, { waiting_completions: [1] }));
  t.notOk(p.state.journals.has(id.text), 'the journal left memory at the suspension');
  const inFlight = p.state.takeWrites(); // the batch is being written: not in the store yet
  t.equal(p.store.size, 0);
  const woken = run({ kind: 'timer_fired', timer_fired: { invocation_id: id.bytes, completion_id: 1, wake_up_ms: wake, kind: TimerKind.SLEEP } }, wake);
  t.same(woken, [{ kind: 'start', id: id.text, epoch: 1 }], 'it wakes');
  t.equal(p.state.journal(id.text).length, 3, 'with its whole journal: input, sleep and the completion');
  for (const [k, v] of [...inFlight, ...p.state.takeWrites()]) v === null ? p.store.delete(k) : p.store.set(k, v);
});
