// Completed invocations leave memory past a bound and are read back from the store on demand;
// the fold gives the same result either way.
import t from 'tap';
import { collectedArrayBuffers } from './helpers/memory.mjs';
import { IDLE_STATUSES_IN_MEMORY, PartitionState } from '../dist/partition/state.js';
import { fold } from '../dist/partition/fold/index.js';
import { Outcome } from '../dist/log/commands.js';
import { MessageType, encode, pb } from '../dist/protocol/messages.js';
import { InvocationId, idempotentInvocationId } from '../dist/common/ids.js';
import { invocationsTable } from '../dist/storage/tables/invocations.js';

/** A partition state over an in-memory "store" that receives every batch's writes. */
function partition() {
  const store = new Map();
  const state = new PartitionState(0);
  state.loader = (key) => store.get(key);
  let now = 1_000;
  const apply = (cmd) => {
    fold({ state, actions: [], now_ms: ++now }, { timestamp_ms: now, ...cmd });
    for (const [k, v] of state.takeWrites()) v === null ? store.delete(k) : store.set(k, v);
  };
  return { state, store, apply };
}

function complete(apply, id, result) {
  apply({
    kind: 'journal_append',
    journal_append: {
      invocation_id: id.bytes,
      epoch: 0,
      entry_type: MessageType.OutputCommand,
      entry: Buffer.from(encode(pb.Output, { value: { content: Buffer.from(JSON.stringify(result)) } })),
    },
  });
  apply({ kind: 'attempt_ended', attempt_ended: { invocation_id: id.bytes, epoch: 0, outcome: Outcome.END } });
}

t.test('memory holds a bounded number of completed invocations; the rest come back from the store', async (t) => {
  const { state, store, apply } = partition();
  const total = IDLE_STATUSES_IN_MEMORY + 500;
  const ids = [];
  for (let i = 0; i < total; i++) {
    const id = idempotentInvocationId('Svc', '', 'h', `key-${i}`);
    ids.push(id);
    apply({ kind: 'invoke', invoke: { invocation_id: id.bytes, service: 'Svc', handler: 'h', idempotency_key: `key-${i}`, service_type: 'Service' } });
    complete(apply, id, i);
  }
  t.ok(state.invocations.size <= IDLE_STATUSES_IN_MEMORY, `in memory: ${state.invocations.size}`);
  t.notOk(state.invocations.has(ids[0].text), 'the oldest completed invocation left memory');
  const first = state.status(ids[0].text);
  t.equal(first?.status, 'completed', 'read back from the store');
  t.equal(Buffer.from(first.result.value, 'base64').toString(), '0');
  t.same(JSON.parse(store.get(invocationsTable.key(0, ids[0].text)).toString()), first, 'same content as stored');

  // A repeat of an evicted idempotent request lands on the existing invocation: nothing new starts.
  const before = store.size;
  const actions = [];
  fold({ state, actions, now_ms: 9e9 }, { timestamp_ms: 9e9, kind: 'invoke', invoke: { invocation_id: ids[1].bytes, service: 'Svc', handler: 'h', idempotency_key: 'key-1', service_type: 'Service' } });
  t.same(actions, [], 'no attempt for a request that already completed');
  t.equal(state.takeWrites().length, 0);
  t.equal(store.size, before);

  // Purging an evicted invocation removes it from the store.
  apply({ kind: 'purge', purge: { invocation_id: ids[2].bytes } });
  t.equal(state.status(ids[2].text), undefined);
  t.equal(store.get(invocationsTable.key(0, ids[2].text)), undefined);
});

t.test('running invocations are never evicted', async (t) => {
  const { state, apply } = partition();
  const running = InvocationId.fromBytes(idempotentInvocationId('Svc', '', 'h', 'running').bytes);
  apply({ kind: 'invoke', invoke: { invocation_id: running.bytes, service: 'Svc', handler: 'h', service_type: 'Service' } });
  for (let i = 0; i < IDLE_STATUSES_IN_MEMORY + 10; i++) {
    const id = idempotentInvocationId('Svc', '', 'h', `c-${i}`);
    apply({ kind: 'invoke', invoke: { invocation_id: id.bytes, service: 'Svc', handler: 'h', service_type: 'Service' } });
    complete(apply, id, i);
  }
  t.equal(state.invocations.get(running.text)?.status, 'running');
  t.ok(state.journals.has(running.text), 'its journal stays in memory too');
  t.equal(state.journal(running.text).length, 1);
});

t.test('a status read while its batch is being written sees the batch, not the store', async (t) => {
  const { state, store, apply } = partition();
  const id = idempotentInvocationId('Svc', '', 'h', 'k');
  apply({ kind: 'invoke', invoke: { invocation_id: id.bytes, service: 'Svc', handler: 'h', idempotency_key: 'k', service_type: 'Service' } });
  complete(apply, id, 1);
  t.equal(state.status(id.text)?.status, 'completed');

  // The purge is folded and its writes taken; the store has not received them yet.
  fold({ state, actions: [], now_ms: 5e9 }, { timestamp_ms: 5e9, kind: 'purge', purge: { invocation_id: id.bytes } });
  const inFlight = state.takeWrites();
  t.ok(store.has(invocationsTable.key(0, id.text)), 'the store still holds the status');
  t.equal(state.status(id.text), undefined, 'a read in between sees the purge');
  t.notOk(state.invocations.has(id.text), 'and caches nothing from the store');

  for (const [k, v] of inFlight) v === null ? store.delete(k) : store.set(k, v);
  state.writesDurable();
  t.equal(state.status(id.text), undefined, 'gone once written');
});

t.test('object state read back from the store (a cache too small for one object) folds exactly as with everything cached', async (t) => {
  const { partition: fixture, objectInvoke, objectId, append, ended, MessageType, Outcome, encode, pb } = await import('./helpers/fold.mjs');
  const id = objectId('Obj', 'k');
  const run = (cacheBytes) => {
    const p = fixture(0, cacheBytes);
    const notes = [];
    const writes = [];
    const apply = (cmd) => {
      const actions = p.apply(cmd);
      for (const a of actions) if (a.kind === 'forward') notes.push(Buffer.from(a.payload).toString('base64'));
    };
    const originalTake = p.state.takeWrites.bind(p.state);
    p.state.takeWrites = () => {
      const w = originalTake();
      writes.push(...w.map(([k, v]) => [k, v === null ? null : Buffer.from(v).toString('base64')]));
      return w;
    };
    apply(objectInvoke(id, 'k'));
    const set = (key, value) => apply(append(id, 0, MessageType.SetStateCommand, encode(pb.SetState, { key: Buffer.from(key), value: { content: Buffer.from(value) } })));
    const getLazy = (key, cid) => apply(append(id, 0, MessageType.GetLazyStateCommand, encode(pb.GetLazyState, { key: Buffer.from(key), result_completion_id: cid })));
    for (let i = 0; i < 10; i++) set(`key${i % 7}`, `value ${i} ${'x'.repeat(i * 10)}`);
    // What an attempt's start does for its eager state: the whole object, cached when it fits.
    p.state.stateOf('Obj/k');
    const loaded = p.state.stateCacheUse();
    for (let i = 10; i < 20; i++) set(`key${i % 7}`, `value ${i} ${'x'.repeat(i * 10)}`);
    const use = { ...p.state.stateCacheUse(), grew: p.state.stateCacheUse().bytes - loaded.bytes };
    getLazy('key3', 1);
    getLazy('missing', 2);
    apply(append(id, 0, MessageType.GetLazyStateKeysCommand, encode(pb.GetLazyStateKeys, { result_completion_id: 3 })));
    apply(append(id, 0, MessageType.ClearStateCommand, encode(pb.ClearState, { key: Buffer.from('key1') })));
    apply(append(id, 0, MessageType.GetLazyStateKeysCommand, encode(pb.GetLazyStateKeys, { result_completion_id: 4 })));
    apply(append(id, 0, MessageType.ClearAllStateCommand, encode(pb.ClearAllState, {})));
    apply(append(id, 0, MessageType.GetLazyStateKeysCommand, encode(pb.GetLazyStateKeys, { result_completion_id: 5 })));
    set('after', 'clear');
    apply(ended(id, 0, Outcome.SUSPENDED ?? 1));
    return { writes, notes, use, keys: p.state.stateKeys('Obj/k'), journal: p.journal(id).map((e) => [e.type, Buffer.from(e.payload).toString('base64')]) };
  };
  const cached = run(undefined);
  const tiny = run(1);
  t.equal(tiny.use.objects, 0, 'nothing fits the tiny cache: every read went to the store');
  t.ok(cached.use.objects >= 1, 'the default cache held the object');
  t.ok(cached.use.grew > 500, `the cache counts the bytes an object gains after it is cached (${cached.use.grew})`);
  t.same(tiny.journal, cached.journal, 'the same completions (values, missing key, key lists)');
  t.same(tiny.writes, cached.writes, 'the same store writes, byte for byte');
  t.same(tiny.keys, [Buffer.from('after').toString('base64url')]);
  t.ok(cached.journal.length >= 25);
});

t.test('cached object state holds its own bytes, not the messages its values were decoded from', async (t) => {
  // A value decoded from a message is a view of the whole message: cached as it is, 16 bytes of
  // state would keep 64 KiB alive (~128 MB for these 2,000 objects).
  const { state, store } = partition();
  const before = await collectedArrayBuffers();
  let wrong = 0;
  for (let i = 0; i < 2_000; i++) {
    const message = Buffer.allocUnsafeSlow(64 * 1024).fill(i & 0xff);
    state.setState(`Obj/k${i}`, 'v', message.subarray(100, 116));
    if (!state.stateOf(`Obj/k${i}`).get('v')?.equals(Buffer.alloc(16, i & 0xff))) wrong++;
    for (const [k, v] of state.takeWrites()) v === null ? store.delete(k) : store.set(k, v);
  }
  const grownMb = ((await collectedArrayBuffers()) - before) / 1048576;
  t.equal(wrong, 0, 'every value reads back');
  t.equal(state.stateCacheUse().objects, 2_000, 'every object is cached');
  t.ok(grownMb < 8, `array buffers grew ${grownMb.toFixed(1)} MB for 2,000 cached values of 16 bytes`);
});
