import { assert } from '../common/assert.js';
import type { Db } from '../storage/store.js';
import { dedupTable } from '../storage/tables/dedup.js';
import { fsmTable } from '../storage/tables/fsm.js';
import { inboxTable } from '../storage/tables/inbox.js';
import { invocationsTable } from '../storage/tables/invocations.js';
import { liveTable } from '../storage/tables/live.js';
import { locksTable } from '../storage/tables/locks.js';
import { outboxTable } from '../storage/tables/outbox.js';
import { promisesTable } from '../storage/tables/promises.js';
import { positionName, subscriptionPositionsTable } from '../storage/tables/subscription-positions.js';
import { PartitionState, type Action } from './state.js';

/**
 * Loads what a partition needs in memory from the store: its live invocations, locks, inboxes,
 * promises, outbox and counters. Completed invocations, journals and object state are read
 * when the fold needs them; timers by the worker's TimerWindow. Checks what it reads against itself.
 */
export async function loadState(db: Db, partition: number, state_cache_bytes?: number): Promise<PartitionState> {
  const state = new PartitionState(partition, state_cache_bytes);
  state.loader = (key) => db.getSync(key);
  for await (const id of liveTable.scan(db, partition)) {
    const raw = db.getSync(invocationsTable.key(partition, id));
    assert(raw !== undefined, () => `partition ${partition}: ${id} is indexed as live but has no status`);
    const s = invocationsTable.decode(raw);
    assert(s.status !== 'completed', () => `partition ${partition}: ${id} is indexed as live but has completed`);
    state.invocations.set(id, s);
    state.live.add(id);
  }
  for (const s of state.invocations.values()) if (s.invoked_by_subscription_id) state.countSubscriptionInvocation(s.invoked_by_subscription_id, 1);
  // Journals load on first use (PartitionState.journal).
  for await (const [objectKey, id] of locksTable.scan(db, partition)) state.locks.set(objectKey, id);
  // An inbox's keys end in its zero-padded sequence number: the scan gives each queue in order.
  for await (const [objectKey, entry] of inboxTable.scan(db, partition)) {
    const q = state.inboxes.get(objectKey) ?? [];
    assert(q.length === 0 || q[q.length - 1]!.seq < entry.seq, () => `partition ${partition}: inbox of ${objectKey} out of order at ${entry.seq}`);
    q.push(entry);
    state.inboxes.set(objectKey, q);
  }
  for await (const [key, promise] of promisesTable.scan(db, partition)) state.promises.set(key, promise);
  // In sequence order (zero-padded keys), which the map keeps: delivery follows it.
  let highestOutbox = 0;
  for await (const entry of outboxTable.scan(db, partition)) {
    assert(entry.seq > highestOutbox, () => `partition ${partition}: outbox entry ${entry.seq} after ${highestOutbox}`);
    highestOutbox = entry.seq;
    state.outbox.set(entry.seq, entry);
  }
  for await (const [source, seq] of dedupTable.scan(db, partition)) state.dedup.set(source, seq);
  for await (const p of subscriptionPositionsTable.scan(db, partition)) state.subscriptionPositions.set(positionName(p.subscription_id, p.topic, p.kafka_partition), p);
  state.counters = await fsmTable.read(db, partition);
  // Timers are not loaded (the worker's TimerWindow reads the next few); the count comes with the counters.
  assert(Number.isInteger(state.counters.timers) && state.counters.timers >= 0, () => `partition ${partition}: ${state.counters.timers} timers counted`);
  assert(highestOutbox <= state.counters.outbox_seq, () => `partition ${partition}: outbox entry ${highestOutbox} beyond the outbox counter ${state.counters.outbox_seq}`);
  for (const [objectKey, holder] of state.locks) {
    const s = state.invocations.get(holder);
    assert(s !== undefined, () => `partition ${partition}: ${objectKey} is locked by ${holder}, which is not a live invocation`);
  }
  state.takeWrites();
  return state;
}

/** The actions that bring a freshly opened partition back to life (its timers: TimerWindow.start). */
export function recoveryActions(state: PartitionState): Action[] {
  const actions: Action[] = [];
  for (const s of state.invocations.values()) {
    if (s.status === 'running') actions.push({ kind: 'start', id: s.id, epoch: s.epoch });
    else if (s.status === 'backing-off') actions.push({ kind: 'retry', id: s.id, epoch: s.epoch, at_ms: s.next_retry_at_ms ?? 0 });
  }
  for (const entry of state.outbox.values()) actions.push({ kind: 'outbox', entry });
  return actions;
}
