// What a subscription's consumer needs of the partitions: where a key lives, an append, and what
// the partitions hold of the subscription (its invocations not completed, its positions). With one
// event loop these are the worker's own partitions (led, or followed in a cluster); with partition
// threads, the main thread's copy of what the threads told it (threads/subscription-mirror.ts).
import type { CommandKind } from '../log/commands.js';
import type { Worker } from '../partition/worker.js';
import type { SubscriptionPosition } from '../storage/tables/subscription-positions.js';
import { positionPartitionKey } from './records.js';

export interface SubscriptionPartitions {
  partitionIndexOf(partitionKey: bigint): number;
  /** Resolves once the command is durable in the partition's log and folded. */
  appendTo(partition: number, command: CommandKind): Promise<void>;
  /** The subscription's invocations that have not completed, over every partition. */
  pending(subscription_id: string): number;
  /** Keel's stored position of one topic partition, when there is one. */
  position(subscription_id: string, topic: string, kafka_partition: number): SubscriptionPosition | undefined;
  /** Every stored position of the subscription's topic. */
  positions(subscription_id: string, topic: string): SubscriptionPosition[];
}

/** The partitions of this event loop's worker. */
export function workerPartitions(worker: Worker): SubscriptionPartitions {
  return {
    partitionIndexOf: (partitionKey) => worker.partitionIndexOf(partitionKey),
    appendTo: (partition, command) => worker.appendTo(partition, command),
    pending(subscription_id) {
      let n = 0;
      for (const p of worker.views()) n += p.state.subscriptionPending(subscription_id);
      return n;
    },
    // As the partition keeping it has it here (led, or followed: a position a moment old only means
    // records delivered again, which the fold drops).
    position: (subscription_id, topic, kafka_partition) =>
      worker.viewOf(positionPartitionKey(subscription_id, topic, kafka_partition)).subscriptionPosition(subscription_id, topic, kafka_partition),
    positions(subscription_id, topic) {
      const out: SubscriptionPosition[] = [];
      for (const view of worker.views()) {
        for (const pos of view.state.subscriptionPositions.values()) if (pos.subscription_id === subscription_id && pos.topic === topic) out.push(pos);
      }
      return out;
    },
  };
}
