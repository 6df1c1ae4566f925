// The main thread's copy of what partition threads hold of Kafka subscriptions
// (threads/subscription-mirror.ts): pending counts summed over partitions, each told as a whole;
// positions kept per topic partition as their owning partition tells them (another partition's
// copy, left from before a change of worker.partitions, is ignored), refused when told going
// back; the view the consumers use.
import t from 'tap';
import { partitionIndexOf } from '../dist/common/ids.js';
import { positionPartitionKey } from '../dist/subscriptions/records.js';
import { SubscriptionMirror, threadedPartitions } from '../dist/threads/subscription-mirror.js';

const pos = (kafka_partition, next_offset, topic = 'orders', subscription_id = 'sub_a') => ({ subscription_id, topic, kafka_partition, next_offset, delivered: next_offset, skipped: 0, updated_at_ms: 1 });
/** The partition (of `partitions`) that keeps a position, as the server maps it. */
const ownerOf = (p, partitions) => partitionIndexOf(positionPartitionKey(p.subscription_id, p.topic, p.kafka_partition), partitions);
/** Each position told by the partition that owns it. */
const tell = (m, partitions, positions) => {
  for (const p of positions) m.update({ partition: ownerOf(p, partitions), pending: {}, positions: [p] });
};

t.test('pending counts: each partition tells its own, the mirror sums them', async (t) => {
  const m = new SubscriptionMirror(4);
  t.equal(m.pending('sub_a'), 0, 'nothing told: nothing pending');
  m.update({ partition: 0, pending: { sub_a: 3, sub_b: 1 }, positions: [] });
  m.update({ partition: 2, pending: { sub_a: 4 }, positions: [] });
  t.equal(m.pending('sub_a'), 7);
  t.equal(m.pending('sub_b'), 1);
  m.update({ partition: 0, pending: {}, positions: [] });
  t.equal(m.pending('sub_a'), 4, 'a partition whose invocations completed tells an empty count');
  t.equal(m.pending('sub_b'), 0);
  t.throws(() => m.update({ partition: 4, pending: {}, positions: [] }), /partition 4 of 4/, 'a partition past the count is refused');
});

t.test('positions: per (subscription, topic, Kafka partition), from their owner, never back', async (t) => {
  const m = new SubscriptionMirror(8);
  tell(m, 8, [pos(0, 10), pos(1, 5), pos(0, 7, 'other')]);
  t.equal(m.position('sub_a', 'orders', 0)?.next_offset, 10);
  t.equal(m.position('sub_a', 'other', 0)?.next_offset, 7);
  t.equal(m.position('sub_b', 'orders', 0), undefined, 'another subscription has none');
  t.same(m.positions('sub_a', 'orders').map((p) => [p.kafka_partition, p.next_offset]).sort(), [[0, 10], [1, 5]]);
  tell(m, 8, [pos(0, 12)]);
  t.equal(m.position('sub_a', 'orders', 0)?.next_offset, 12, 'a later position replaces it');
  t.throws(() => tell(m, 8, [pos(0, 11)]), /going back from 12 to 11/);
  const elsewhere = (ownerOf(pos(0, 0), 8) + 1) % 8;
  m.update({ partition: elsewhere, pending: {}, positions: [pos(0, 3)] });
  t.equal(m.position('sub_a', 'orders', 0)?.next_offset, 12, 'a partition that does not own the position is not heard (an older copy, or a bug)');
});

t.test('the consumers\' view: partitions as the server maps keys, appends handed on', async (t) => {
  const m = new SubscriptionMirror(8);
  const appended = [];
  const view = threadedPartitions(m, 8, async (partition, command) => void appended.push([partition, command.kind]));
  t.equal(view.partitionIndexOf(0n), 0);
  t.equal(view.partitionIndexOf((1n << 64n) - 1n), 7);
  t.equal(view.partitionIndexOf(1n << 63n), 4);
  await view.appendTo(5, { kind: 'subscription_records' });
  t.same(appended, [[5, 'subscription_records']]);
  m.update({ partition: 3, pending: { sub_a: 2 }, positions: [] });
  tell(m, 8, [pos(0, 1)]);
  t.equal(view.pending('sub_a'), 2);
  t.equal(view.position('sub_a', 'orders', 0)?.next_offset, 1);
});

t.test('a partition tells its counts only when they changed: PartitionState.subscriptionCountsEqual', async (t) => {
  const { PartitionState } = await import('../dist/partition/state.js');
  const state = new PartitionState(0);
  t.notOk(state.subscriptionCountsEqual(undefined), 'nothing told yet: tell');
  t.ok(state.subscriptionCountsEqual({}), 'none pending, none told');
  state.counters.subscriptions.sub_a = 2;
  t.notOk(state.subscriptionCountsEqual({}), 'one more pending than told');
  const told = state.subscriptionCounts();
  t.ok(state.subscriptionCountsEqual(told));
  state.counters.subscriptions.sub_a = 3;
  t.notOk(state.subscriptionCountsEqual(told), 'a count moved');
  t.equal(told.sub_a, 2, 'what was told is a copy');
  delete state.counters.subscriptions.sub_a;
  t.notOk(state.subscriptionCountsEqual({ sub_a: 2 }), 'a subscription gone from the counts');
  t.ok(state.subscriptionCountsEqual({}));
});
