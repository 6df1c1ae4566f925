// What a partition keeps in memory does not grow with what it retains: sleeping invocations,
// their journals, the locks they hold and workflow promises stay in the store and are read back
// when a command reaches them, with the same fold as if they had stayed; counts and the restart
// index are kept in the counters so that nothing needs scanning at open.
import t from 'tap';
import { IDLE_STATUSES_IN_MEMORY, PartitionState } from '../dist/partition/state.js';
import { restartTable } from '../dist/storage/tables/restart.js';
import { fsmTable } from '../dist/storage/tables/fsm.js';
import { partition, objectId, objectInvoke, append, ended, Outcome, MessageType, TimerKind, encode, pb, lastNotification, completeWith } from './helpers/fold.mjs';

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

t.test('a partition rebuilt from its commands with tiny caches writes the same store', async (t) => {
  // Every command folded twice: into a partition with the default caches and into one that keeps
  // (almost) nothing. The stores must be equal byte for byte, so the fold does not depend on the cache.
  const big = partition();
  const small = partition(0, 1);
  const both = { apply: (cmd, at) => (big.apply(cmd, at), small.apply(cmd, at)), get now() { return big.now; } };
  const ids = [];
  for (let i = 0; i < 50; i++) {
    const id = objectId('Obj', `k${i % 7}`);
    ids.push(id);
    both.apply(objectInvoke(id, `k${i % 7}`));
  }
  for (const id of ids) {
    const s = big.status(id);
    if (s.status !== 'running') continue;
    both.apply(append(id, s.epoch, MessageType.SetStateCommand, encode(pb.SetState, { key: Buffer.from('n'), value: { content: Buffer.from(id.text) } })));
    both.apply(append(id, s.epoch, MessageType.OutputCommand, encode(pb.Output, { value: { content: Buffer.from('1') } })));
    both.apply(ended(id, s.epoch, Outcome.END));
  }
  t.same([...small.store.keys()].sort(), [...big.store.keys()].sort(), 'the same keys');
  for (const [k, v] of big.store) t.ok(small.store.get(k)?.equals(v), `same value at ${k}`, { diagnostic: false });
  t.same(counters(big).statuses, counters(small).statuses);
});
