// Keel's own seam to Kafka: one consumer of one topic in one consumer group, whatever library is
// behind it. Keel keeps the position of every topic-partition in its own log and hands it back
// when a partition is assigned; commits to Kafka are for visibility only, never for correctness.
//
// Contract, for every implementation:
// - `onAssigned` is called with the partitions newly assigned to this member before any of their
//   records is delivered; it answers where each starts (the offset of the next record to deliver).
//   A partition it leaves out starts at the group's committed offset, or at `auto.offset.reset`.
// - `onRevoked` is called with the partitions taken away (rebalance, restart after a failure,
//   stop); no record of them is delivered after it until they are assigned again.
// - `onRecords` gets records of one partition, in offset order, each offset once per assignment;
//   the next records of that partition wait until its promise settles. A rejection is warned
//   about (unless the error has `quiet: true`: the handler said why itself) and the same records
//   are delivered again after a backoff. Hold it briefly: use `pause` for backpressure.
// - `pause`/`resume`/`seek` act per partition and survive rebalances while the partition stays
//   assigned; `seek` makes the next delivered record of the partition the one at `offset`.
// - Broker down, unknown topic, coordinator errors: `onWarning`, retries with backoff until
//   `stop`; nothing throws out of the consumer.

export interface KafkaRecord {
  topic: string;
  partition: number;
  offset: number;
  key: Buffer | null;
  value: Buffer | null;
  /** In record order; a name may repeat. */
  headers: Array<[string, Buffer]>;
  /** Milliseconds since the epoch (create or log-append time, as the topic says). */
  timestamp: number;
}

export interface PartitionLag {
  partition: number;
  /** The next offset this consumer will deliver, when it knows it. */
  position: number | undefined;
  /** The offset after the last record in the partition. */
  highWatermark: number;
  /** `highWatermark - position`, when the position is known. */
  lag: number | undefined;
}

export interface KafkaConsumerHandlers {
  onAssigned(partitions: number[]): ReadonlyMap<number, number> | Promise<ReadonlyMap<number, number>>;
  onRevoked(partitions: number[]): void;
  onRecords(records: KafkaRecord[]): Promise<void>;
  onWarning(message: string, detail: Record<string, unknown>): void;
}

export interface KafkaConsumer {
  readonly library: string;
  /** Connects and joins the group in the background; returns at once. */
  start(): void;
  /** Partitions assigned to this member now, ascending. */
  assignment(): number[];
  pause(partitions: number[]): void;
  resume(partitions: number[]): void;
  paused(): number[];
  seek(partition: number, offset: number): void;
  /** Commits positions (next offsets) to the group, for visibility only. */
  commit(positions: ReadonlyMap<number, number>): Promise<void>;
  /** High watermark, position and lag of each assigned partition. */
  lag(): Promise<PartitionLag[]>;
  /** Leaves the group and closes every connection. */
  stop(): Promise<void>;
}

/** Exponential backoff with jitter between `initial` and `max` milliseconds. */
export function backoff(attempt: number, initial: number, max: number): number {
  const base = Math.min(max, Math.max(1, initial) * 2 ** Math.min(attempt, 30));
  return Math.round(base * (0.8 + Math.random() * 0.4));
}

/** Warnings, each distinct message at most once per `window_ms` (a broker down floods otherwise). */
export function throttledWarnings(
  sink: KafkaConsumerHandlers['onWarning'],
  window_ms = 5_000,
): KafkaConsumerHandlers['onWarning'] {
  const last = new Map<string, number>();
  return (message, detail) => {
    const now = Date.now();
    const at = last.get(message);
    if (at !== undefined && now - at < window_ms) return;
    last.set(message, now);
    if (last.size > 1000) last.clear();
    sink(message, detail);
  };
}
