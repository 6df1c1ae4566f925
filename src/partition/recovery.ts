import { assert } from '../common/assert.js';
import type { Db } from '../storage/store.js';
import { dedupTable } from '../storage/tables/dedup.js';
import { fsmTable } from '../storage/tables/fsm.js';
import { inboxTable } from '../storage/tables/inbox.js';
import { limitsTable } from '../storage/tables/limits.js';
import { stateTtlTable } from '../storage/tables/state-ttl.js';
import { vqueuesTable } from '../storage/tables/vqueues.js';
import { outboxTable } from '../storage/tables/outbox.js';
import { restartTable } from '../storage/tables/restart.js';
import { positionName, subscriptionPositionsTable } from '../storage/tables/subscription-positions.js';
import { PartitionState, type Action } from './state.js';

/**
 * Loads what a partition needs in memory from the store: the invocations that run or back off
 * (the `restart` index), inboxes and counters. Everything else — the statuses of sleeping,
 * paused and completed invocations, journals, locks, promises, object state — is read when the
 * fold needs it; timers by the worker's TimerWindow, the outbox by its Shuffle.
 */
export async function loadState(db: Db, partition: number, state_cache_bytes?: number): Promise<PartitionState> {
  const state = new PartitionState(partition, state_cache_bytes);
  state.loader = (key) => db.getSync(key);
  state.setCounters(await fsmTable.read(db, partition));
  for await (const id of restartTable.scan(db, partition)) {
    const s = state.status(id);
    assert(s !== undefined, () => `partition ${partition}: ${id} is indexed to restart but has no status`);
    assert(s.status === 'running' || s.status === 'backing-off', () => `partition ${partition}: ${id} is indexed to restart but is ${s.status}`);
  }
  // An inbox's keys end in its zero-padded sequence number: the scan gives each queue in order.
  for await (const [objectKey, entry] of inboxTable.scan(db, partition)) {
    const q = state.inboxes.get(objectKey) ?? [];
    assert(q.length === 0 || q[q.length - 1]!.seq < entry.seq, () => `partition ${partition}: inbox of ${objectKey} out of order at ${entry.seq}`);
    q.push(entry);
    state.inboxes.set(objectKey, q);
  }
  state.flow.setRules(await limitsTable.read(db, partition), false);
  state.ttl.setBook(await stateTtlTable.readBook(db, partition), false);
  for await (const [scope, limitKey, entry] of vqueuesTable.scan(db, partition)) state.flow.load(scope, limitKey, entry);
  state.flow.released.clear();
  for await (const [source, seq] of dedupTable.scan(db, partition)) state.dedup.set(source, seq);
  for await (const p of subscriptionPositionsTable.scan(db, partition)) state.subscriptionPositions.set(positionName(p.subscription_id, p.topic, p.kafka_partition), p);
  // Timers are not loaded (the worker's TimerWindow reads the next few); the count comes with the counters.
  assert(Number.isInteger(state.counters.timers) && state.counters.timers >= 0, () => `partition ${partition}: ${state.counters.timers} timers counted`);
  // The outbox stays in the store: the worker's Shuffle reads it in order, in chunks.
  const highestOutbox = await outboxTable.last(db, partition);
  assert(highestOutbox <= state.counters.outbox_seq, () => `partition ${partition}: outbox entry ${highestOutbox} beyond the outbox counter ${state.counters.outbox_seq}`);
  state.takeWrites();
  return state;
}

/** The actions that bring a freshly opened partition back to life (its timers: TimerWindow.start). */
export function recoveryActions(state: PartitionState): Action[] {
  const actions: Action[] = [];
  // Only those of the restart index are in memory now; none other needs an action.
  for (const s of state.invocations.values()) {
    if (s.status === 'running') actions.push({ kind: 'start', id: s.id, epoch: s.epoch });
    else if (s.status === 'backing-off') actions.push({ kind: 'retry', id: s.id, epoch: s.epoch, at_ms: s.next_retry_at_ms ?? 0 });
  }
  return actions;
}
