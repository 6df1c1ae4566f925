// Reads one partition of a Kafka topic from an offset, with no consumer group.
//
// kafkajs (2.2.4, its last release) reads only through consumer groups: no manual assignment,
// and a group's first join waits the broker's `group.initial.rebalance.delay.ms` (3 s by
// default) — a new partition leader would wait that long before it could catch up. The log needs
// neither a group nor committed offsets (its position is in the node's own store), so this
// reader sends Fetch requests itself, through the cluster object kafkajs builds for its
// consumers and the `Batch` that drops aborted transactions and control records (kafkajs's
// files, reached by path: the package has no `exports` map, and its last release will not move
// them). Nothing else touches kafkajs's insides.
import { createRequire } from 'node:module';
import type { Kafka } from 'kafkajs';
import { assert } from '../common/assert.js';

const require = createRequire(import.meta.url);

/** One record as read: its offset, its value, its headers (each one value, as a Buffer). */
export interface KafkaRecord {
  offset: number;
  value: Buffer;
  headers: Record<string, Buffer | undefined>;
}

export interface FetchResult {
  records: KafkaRecord[];
  /** The offset to fetch next (past every record returned, control records and aborted ones included). */
  next_offset: number;
  /** The end of what read_committed readers may see now: reading has caught up at this offset. */
  last_stable_offset: number;
  /**
   * The end of what is replicated. Above the stable offset while transactions are open — and
   * briefly after they commit: a commit returns before its markers are written.
   */
  high_watermark: number;
}

interface KafkajsBroker {
  fetch(request: unknown): Promise<{ responses: Array<{ topicName: string; partitions: unknown[] }> }>;
}
interface KafkajsCluster {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  addTargetTopic(topic: string): Promise<void>;
  refreshMetadata(): Promise<void>;
  findLeaderForPartitions(topic: string, partitions: number[]): Record<string, number[]>;
  findBroker(args: { nodeId: string }): Promise<KafkajsBroker>;
}
interface KafkajsBatch {
  messages: Array<{ offset: string; value: Buffer | null; headers?: Record<string, Buffer | Buffer[] | undefined> }>;
  lastOffset(): string;
}
type BatchClass = new (topic: string, fetchedOffset: string, partitionData: unknown) => KafkajsBatch;

const READ_COMMITTED = 1;
/** How long a fetch waits at the end of the partition for new records. */
const MAX_WAIT_MS = 100;
const MAX_BYTES = 8 * 1024 * 1024;
/** Fetches retried while a partition moves between brokers (~15 s at 500 ms apart). */
const FETCH_RETRIES = 30;

/** The cluster object of a kafkajs client, built as its consumers build theirs (read_committed). */
function clusterOf(kafka: Kafka): KafkajsCluster {
  const create = Object.getOwnPropertySymbols(kafka).find((s) => s.description === 'private:Kafka:createCluster');
  assert(create !== undefined, () => 'kafkajs: no cluster factory on the client (a kafkajs other than 2.2.x?)');
  const factory = (kafka as unknown as Record<symbol, (o: object) => KafkajsCluster>)[create];
  return factory({ isolationLevel: READ_COMMITTED, allowAutoTopicCreation: false, metadataMaxAge: 300_000 });
}

export class KafkaPartitionReader {
  private readonly cluster: KafkajsCluster;
  private readonly Batch: BatchClass = require('kafkajs/src/consumer/batch') as BatchClass;
  private connected: Promise<void> | undefined;

  constructor(
    kafka: Kafka,
    private readonly topic: string,
  ) {
    this.cluster = clusterOf(kafka);
  }

  /**
   * The committed records of `partition` from `offset` on (at most ~8 MiB), waiting up to 100 ms
   * for some at the end. Retried while the partition moves between brokers (NOT_LEADER_OR_FOLLOWER:
   * metadata is refreshed first); then throws what the broker answered.
   */
  async fetch(partition: number, offset: number): Promise<FetchResult> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.fetchOnce(partition, offset);
      } catch (err) {
        if (attempt >= FETCH_RETRIES || (err as { type?: string }).type === 'OFFSET_OUT_OF_RANGE') throw err;
        await new Promise((resolve) => setTimeout(resolve, Math.min(500, 50 * 2 ** attempt)));
      }
    }
  }

  private async fetchOnce(partition: number, offset: number): Promise<FetchResult> {
    assert(Number.isSafeInteger(offset) && offset >= 0, () => `fetch offset ${offset}`);
    await (this.connected ??= this.connect());
    let broker: KafkajsBroker;
    let response: Awaited<ReturnType<KafkajsBroker['fetch']>>;
    try {
      const leaders = this.cluster.findLeaderForPartitions(this.topic, [partition]);
      const nodeId = Object.keys(leaders)[0];
      if (nodeId === undefined) throw new Error(`no leader known for ${this.topic}/${partition}`);
      broker = await this.cluster.findBroker({ nodeId });
      response = await broker.fetch({
        isolationLevel: READ_COMMITTED,
        maxWaitTime: MAX_WAIT_MS,
        minBytes: 1,
        maxBytes: MAX_BYTES,
        topics: [{ topic: this.topic, partitions: [{ partition, fetchOffset: String(offset), maxBytes: MAX_BYTES }] }],
      });
    } catch (err) {
      await this.cluster.refreshMetadata().catch(() => undefined);
      throw err;
    }
    const data = response.responses[0]?.partitions[0] as { partition: number; lastStableOffset: string; highWatermark: string } | undefined;
    assert(data !== undefined && data.partition === partition, () => `fetch of ${this.topic}/${partition} answered for another partition`);
    const batch = new this.Batch(this.topic, String(offset), data);
    const records = batch.messages.map((m) => ({ offset: Number(m.offset), value: m.value ?? Buffer.alloc(0), headers: headersOf(m.headers) }));
    const stable = Number(data.lastStableOffset) >= 0 ? Number(data.lastStableOffset) : Number(data.highWatermark);
    // lastOffset(): the last record of the response, filtered or not (or the end when empty).
    const next = Math.max(offset, Number(batch.lastOffset()) + 1);
    return { records, next_offset: Math.min(next, Math.max(stable, offset)), last_stable_offset: stable, high_watermark: Number(data.highWatermark) };
  }

  async close(): Promise<void> {
    if (this.connected !== undefined) await this.cluster.disconnect().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    await this.cluster.connect();
    await this.cluster.addTargetTopic(this.topic);
  }
}

function headersOf(raw: Record<string, Buffer | Buffer[] | undefined> | undefined): Record<string, Buffer | undefined> {
  const out: Record<string, Buffer | undefined> = {};
  for (const [name, value] of Object.entries(raw ?? {})) out[name] = Array.isArray(value) ? value[value.length - 1] : value;
  return out;
}
