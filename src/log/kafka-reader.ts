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
  rawMessages: unknown[];
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

/** A fetch waiting for the next request to its partition's leader (`fetchShared`). */
interface Waiting {
  partition: number;
  offset: number;
  resolve(result: FetchResult): void;
  reject(err: unknown): void;
}
type PartitionData = { partition: number; lastStableOffset: string; highWatermark: string };

export class KafkaPartitionReader {
  private readonly cluster: KafkajsCluster;
  private readonly Batch: BatchClass = require('kafkajs/src/consumer/batch') as BatchClass;
  private connecting: Promise<void> | undefined;
  private opened = false;
  private closed = false;
  /** Shared fetches waiting, by leader broker: at most one per partition. */
  private readonly waiting = new Map<string, Waiting[]>();
  /** Brokers a shared fetch is in flight to. */
  private readonly inFlight = new Set<string>();
  /** Turns the order of the partitions in each shared request (see fetchMany). */
  private rotation = 0;
  /** Fetch requests sent to brokers, all kinds: what a node's reading costs the brokers. */
  fetch_requests = 0;

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
  async fetch(partition: number, offset: number, { shared = false } = {}): Promise<FetchResult> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await (shared ? this.fetchShared(partition, offset) : this.fetchOnce(partition, offset));
      } catch (err) {
        if (attempt >= FETCH_RETRIES || this.closed || (err as { type?: string }).type === 'OFFSET_OUT_OF_RANGE') throw err;
        await new Promise((resolve) => setTimeout(resolve, Math.min(500, 50 * 2 ** attempt)));
      }
    }
  }

  private async fetchOnce(partition: number, offset: number): Promise<FetchResult> {
    assert(Number.isSafeInteger(offset) && offset >= 0, () => `fetch offset ${offset}`);
    await this.connected();
    let response: Awaited<ReturnType<KafkajsBroker['fetch']>>;
    try {
      response = await this.request(await this.leaderOf(partition), [{ partition, offset }]);
    } catch (err) {
      await this.cluster.refreshMetadata().catch(() => undefined);
      throw err;
    }
    const data = response.responses[0]?.partitions[0] as PartitionData | undefined;
    assert(data !== undefined && data.partition === partition, () => `fetch of ${this.topic}/${partition} answered for another partition`);
    return this.resultOf(offset, data);
  }

  /**
   * A fetch sent with the other partitions led by the same broker: while a request is in flight
   * to a broker, the fetches asked of it wait and go together in the next one, as Kafka's own
   * consumers fetch (one request per broker for every partition). A node following eight
   * partitions sent eight long polls at once before, each answered alone. For a reader that can
   * wait a poll: a standby following; a leader's reads (taking the lead, an append's check) go alone.
   */
  private async fetchShared(partition: number, offset: number): Promise<FetchResult> {
    assert(Number.isSafeInteger(offset) && offset >= 0, () => `fetch offset ${offset}`);
    await this.connected();
    let nodeId: string;
    try {
      nodeId = await this.leaderOf(partition);
    } catch (err) {
      await this.cluster.refreshMetadata().catch(() => undefined);
      throw err;
    }
    const queue = this.waiting.get(nodeId) ?? [];
    // A second reader of the partition meanwhile (a rebuild beside the follower) reads alone.
    if (queue.some((w) => w.partition === partition)) return this.fetchOnce(partition, offset);
    return new Promise((resolve, reject) => {
      queue.push({ partition, offset, resolve, reject });
      this.waiting.set(nodeId, queue);
      // The readers answered by one response ask again within the same turn: they go together.
      if (queue.length === 1) setImmediate(() => this.sendShared(nodeId));
    });
  }

  private sendShared(nodeId: string): void {
    const batch = this.waiting.get(nodeId);
    if (this.inFlight.has(nodeId) || batch === undefined || batch.length === 0) return;
    this.waiting.delete(nodeId);
    this.inFlight.add(nodeId);
    void this.fetchMany(nodeId, batch)
      .catch((err: unknown) => batch.forEach((w) => w.reject(err)))
      .finally(() => {
        this.inFlight.delete(nodeId);
        this.sendShared(nodeId);
      });
  }

  /**
   * The broker fills a response partition by partition up to MAX_BYTES: one late in the request
   * may get nothing while it has records (resultOf then does not advance it). The order turns
   * with every request so that none waits behind the same busy partitions each time.
   */
  private async fetchMany(nodeId: string, batch: Waiting[]): Promise<void> {
    let byPartition: Map<number, PartitionData>;
    const turn = this.rotation++ % batch.length;
    batch = [...batch.slice(turn), ...batch.slice(0, turn)];
    try {
      const response = await this.request(nodeId, batch);
      byPartition = new Map((response.responses[0]?.partitions as PartitionData[] | undefined)?.map((d) => [d.partition, d]));
    } catch {
      // One partition's error (trimmed past its offset, moved to another broker) fails the whole
      // request: each is asked again alone, and answers for itself.
      await this.cluster.refreshMetadata().catch(() => undefined);
      for (const w of batch) this.fetchOnce(w.partition, w.offset).then(w.resolve, w.reject);
      return;
    }
    for (const w of batch) {
      try {
        const data = byPartition.get(w.partition);
        if (data === undefined) throw new Error(`the fetch of ${this.topic} answered nothing for partition ${w.partition}`);
        w.resolve(this.resultOf(w.offset, data));
      } catch (err) {
        w.reject(err);
      }
    }
  }

  /** The broker leading `partition`, as the metadata last read says. */
  private async leaderOf(partition: number): Promise<string> {
    const nodeId = Object.keys(this.cluster.findLeaderForPartitions(this.topic, [partition]))[0];
    // An election under way: retriable, as kafkajs marks LEADER_NOT_AVAILABLE.
    if (nodeId === undefined) throw Object.assign(new Error(`no leader known for ${this.topic}/${partition}`), { retriable: true });
    return nodeId;
  }

  /** One Fetch request to broker `nodeId` for `partitions` from their offsets (read_committed, a 100 ms long poll). */
  private async request(nodeId: string, partitions: Array<{ partition: number; offset: number }>): ReturnType<KafkajsBroker['fetch']> {
    const broker = await this.cluster.findBroker({ nodeId });
    this.fetch_requests += 1;
    return broker.fetch({
      isolationLevel: READ_COMMITTED,
      maxWaitTime: MAX_WAIT_MS,
      minBytes: 1,
      maxBytes: MAX_BYTES,
      topics: [{ topic: this.topic, partitions: partitions.map((p) => ({ partition: p.partition, fetchOffset: String(p.offset), maxBytes: MAX_BYTES })) }],
    });
  }

  private resultOf(offset: number, data: PartitionData): FetchResult {
    const batch = new this.Batch(this.topic, String(offset), data);
    const records = batch.messages.map((m) => ({ offset: Number(m.offset), value: m.value ?? Buffer.alloc(0), headers: headersOf(m.headers) }));
    const stable = Number(data.lastStableOffset) >= 0 ? Number(data.lastStableOffset) : Number(data.highWatermark);
    // lastOffset(): the last record of the response, filtered or not (or the end when empty).
    // Nothing at all for the partition (not even filtered records) says nothing of where its
    // records end: a shared request can leave a partition out when the response is full.
    if (batch.rawMessages.length === 0) return { records, next_offset: offset, last_stable_offset: stable, high_watermark: Number(data.highWatermark) };
    const next = Math.max(offset, Number(batch.lastOffset()) + 1);
    return { records, next_offset: Math.min(next, Math.max(stable, offset)), last_stable_offset: stable, high_watermark: Number(data.highWatermark) };
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.connecting?.catch(() => undefined);
    if (this.opened) await this.cluster.disconnect().catch(() => undefined);
  }

  /**
   * Connects once. A failed connect is tried again by the next fetch: a topic another node has
   * just created is unknown to some brokers for a moment (UNKNOWN_TOPIC_OR_PARTITION), and a
   * failure kept for good made every later fetch fail with it (a node started beside another
   * exited at start).
   */
  private connected(): Promise<void> {
    // A fetch still retrying when the reader closed connects no more.
    if (this.closed) return Promise.reject(new Error(`the reader of ${this.topic} is closed`));
    this.connecting ??= (async () => {
      this.opened = true;
      await this.cluster.connect();
      await this.cluster.addTargetTopic(this.topic);
    })().catch((err: unknown) => {
      this.connecting = undefined;
      throw err;
    });
    return this.connecting;
  }
}

function headersOf(raw: Record<string, Buffer | Buffer[] | undefined> | undefined): Record<string, Buffer | undefined> {
  const out: Record<string, Buffer | undefined> = {};
  for (const [name, value] of Object.entries(raw ?? {})) out[name] = Array.isArray(value) ? value[value.length - 1] : value;
  return out;
}
