// The main thread's copy of what the partition threads hold of Kafka subscriptions (worker.threads
// > 1): each thread tells it, for each of its partitions, the pending counts and every position at
// its start, then whatever a durable batch changed (Worker.watchSubscriptions), before it answers
// the append that made the batch. The consumers run here and read it synchronously: positions when
// Kafka assigns partitions, pending counts before each chunk.
import { assert } from '../common/assert.js';
import { partitionIndexOf } from '../common/ids.js';
import type { SubscriptionChanges } from '../partition/worker.js';
import { positionName, type SubscriptionPosition } from '../storage/tables/subscription-positions.js';
import type { SubscriptionPartitions } from '../subscriptions/partitions.js';
import { positionPartitionKey } from '../subscriptions/records.js';

export class SubscriptionMirror {
  private readonly pendingBy = new Map<number, Readonly<Record<string, number>>>();
  /** By positionName; one per (subscription, topic, Kafka partition) ever consumed, as in the partitions' memory. */
  private readonly stored = new Map<string, SubscriptionPosition>();

  constructor(private readonly partitions: number) {}

  update(c: SubscriptionChanges): void {
    assert(Number.isInteger(c.partition) && c.partition >= 0 && c.partition < this.partitions, () => `subscription changes of partition ${c.partition} of ${this.partitions}`);
    this.pendingBy.set(c.partition, c.pending);
    for (const p of c.positions) {
      // As with one event loop, a position is read from the partition that owns it now: another may
      // still hold an older copy from before a change of worker.partitions.
      if (partitionIndexOf(positionPartitionKey(p.subscription_id, p.topic, p.kafka_partition), this.partitions) !== c.partition) continue;
      const name = positionName(p.subscription_id, p.topic, p.kafka_partition);
      const before = this.stored.get(name);
      assert(before === undefined || p.next_offset >= before.next_offset, () => `position of ${p.subscription_id} ${p.topic}/${p.kafka_partition} told going back from ${before?.next_offset} to ${p.next_offset}`);
      this.stored.set(name, p);
    }
  }

  pending(subscription_id: string): number {
    let n = 0;
    for (const counts of this.pendingBy.values()) n += counts[subscription_id] ?? 0;
    return n;
  }

  position(subscription_id: string, topic: string, kafka_partition: number): SubscriptionPosition | undefined {
    return this.stored.get(positionName(subscription_id, topic, kafka_partition));
  }

  positions(subscription_id: string, topic: string): SubscriptionPosition[] {
    return [...this.stored.values()].filter((p) => p.subscription_id === subscription_id && p.topic === topic);
  }
}

/** The consumers' view of the partitions on threads: reads from the mirror, appends to the owning thread. */
export function threadedPartitions(mirror: SubscriptionMirror, partitions: number, appendTo: (partition: number, command: Parameters<SubscriptionPartitions['appendTo']>[1]) => Promise<void>): SubscriptionPartitions {
  return {
    partitionIndexOf: (partitionKey) => partitionIndexOf(partitionKey, partitions),
    appendTo,
    pending: (id) => mirror.pending(id),
    position: (id, topic, kafka_partition) => mirror.position(id, topic, kafka_partition),
    positions: (id, topic) => mirror.positions(id, topic),
  };
}
