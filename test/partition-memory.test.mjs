// Completed invocations leave memory past a bound and are read back from the store on demand;
// the fold gives the same result either way.
import t from 'tap';
import { COMPLETED_IN_MEMORY, PartitionState } from '../dist/partition/state.js';
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
  const total = COMPLETED_IN_MEMORY + 500;
  const ids = [];
  for (let i = 0; i < total; i++) {
    const id = idempotentInvocationId('Svc', '', 'h', `key-${i}`);
    ids.push(id);
    apply({ kind: 'invoke', invoke: { invocation_id: id.bytes, service: 'Svc', handler: 'h', idempotency_key: `key-${i}`, service_type: 'Service' } });
    complete(apply, id, i);
  }
  t.ok(state.invocations.size <= COMPLETED_IN_MEMORY, `in memory: ${state.invocations.size}`);
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
  for (let i = 0; i < COMPLETED_IN_MEMORY + 10; i++) {
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
