// A partition's log in Apache Kafka: one topic partition per Keel partition, replicated by
// Kafka (acks=all, min.insync.replicas), written by the partition's leader only.
//
// A deposed leader is kept out by epochs: every record carries its writer's epoch, and readers
// keep only the commands of the epoch announced last before them (epochs.ts), so everyone drops
// a deposed leader's late writes alike. The writer itself learns it was deposed before it
// acknowledges anything: an append resolves only when its records follow the writer's previous
// ones directly (nothing else in between, so no announcement) or when what came between holds no
// later announcement. With `transactional`, Kafka fences too: one transactional.id per partition,
// so a new leader's first transaction aborts the old one's open transaction and refuses its
// next (INVALID_PRODUCER_EPOCH / PRODUCER_FENCED).
//
// The node's own store holds the partition's state, the last position applied and where in the
// topic that position ends (offset, epoch): a restart or a new leader reads the topic from there.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Admin, Kafka, Message, Producer } from 'kafkajs';
import { connectProducer, KAFKA_RETRY, loadKafkajs, retryingRead } from './kafkajs.js';
import { assert } from '../common/assert.js';
import { KeelError } from '../errors/index.js';
import type { Logger } from '../common/logger.js';
import type { GroupWriter } from '../storage/group-writer.js';
import type { Db, StateWrite } from '../storage/store.js';
import { logTable, type LogCursor } from '../storage/tables/log.js';
import { restorePartition, type SnapshotStore } from '../storage/snapshots.js';
import { judge, type EpochState, type LogEntry } from './epochs.js';
import { KafkaPartitionReader, type KafkaRecord } from './kafka-reader.js';
import type { PartitionLog } from './partition-log.js';

export interface KafkaLogSettings {
  /** This node's name: its producers' client id and the name in its announcements. */
  node: string;
  brokers: string[];
  topic: string;
  /** Keel's partitions: the topic has at least as many. */
  partitions: number;
  replication_factor: number;
  min_insync_replicas: number;
  /**
   * Every append in a Kafka transaction of its own (one transactional.id per partition), a
   * second fence beside the epochs. Off by default: kafkajs speaks the transaction protocol of
   * before KIP-890, and each append then waits for the previous one's commit markers (measured
   * 40-320 ms an append, against ~4 ms without).
   */
  transactional: boolean;
  /** Snapshots of the partitions shared by the nodes: a copy that ends below the log's start is restored from the newest. */
  snapshots?: SnapshotStore;
}

/** This node no longer leads the partition (another announced a later epoch): its appends are void. */
export class LeadershipLostError extends Error {
  override readonly name = 'LeadershipLostError';
}

const HEADER_EPOCH = 'keel-epoch';
const HEADER_POSITION = 'keel-position';
const HEADER_NODE = 'keel-node';
/** The largest record batch the log topic takes (topic config `max.message.bytes`): under the brokers' `socket.request.max.bytes` (100 MiB). */
const MAX_BATCH_BYTES = 96 * 1024 * 1024;

/** Where a node's copy of a partition stands in the topic: the next offset to read and the reader's epoch state there. */
type Cursor = LogCursor;

/** Beside a cluster node's store: which log it is a copy of. */
const STORE_LOG_FILE = 'cluster-log';
interface StoreLog {
  kafka_cluster_id: string;
  log_topic: string;
}

function readStoreLog(file: string): StoreLog | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  let log: Partial<StoreLog> | undefined;
  try {
    log = JSON.parse(text) as Partial<StoreLog>;
  } catch {
    log = undefined;
  }
  if (typeof log?.kafka_cluster_id !== 'string' || typeof log.log_topic !== 'string') throw new KeelError('KEEL0015', `${file} does not say which log the store copies: ${JSON.stringify(text.slice(0, 200))}`);
  return log as StoreLog;
}

/** A node's connection to the cluster's brokers, shared by its partitions' logs. */
export class KafkaLogClient {
  readonly kafka: Kafka;
  readonly reader: KafkaPartitionReader;
  private readonly producers = new Map<number, Promise<Producer>>();
  private admin: Admin | undefined;
  private closed = false;
  /** The epoch this node leads each partition in, from the moment its announcement was read back. */
  readonly epochs = new Map<number, number>();

  constructor(
    readonly settings: KafkaLogSettings,
    private readonly logger: Logger,
  ) {
    const { Kafka, logLevel } = loadKafkajs();
    this.kafka = new Kafka({
      clientId: `keel-${settings.node}`,
      brokers: settings.brokers,
      retry: KAFKA_RETRY,
      logLevel: logLevel.WARN,
      // kafkajs logs every error answer it retries (rebalances, leader moves) as an error: what
      // it could not get past reaches Keel as a failed append or read, which says so itself.
      logCreator: () => (entry) => this.logger.debug({ code: 'KEEL0801', kafkajs: entry.namespace }, `kafkajs: ${entry.log.message}`),
    });
    this.reader = new KafkaPartitionReader(this.kafka, settings.topic);
  }

  private async connectedAdmin(): Promise<Admin> {
    if (this.admin === undefined) {
      const admin = this.kafka.admin();
      await admin.connect();
      this.admin = admin;
    }
    return this.admin;
  }

  /** Creates the log topic when it is missing; refuses one with fewer partitions than Keel has. */
  async ensureTopic(): Promise<void> {
    const s = this.settings;
    const admin = await this.connectedAdmin();
    await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic: s.topic, numPartitions: s.partitions, replicationFactor: s.replication_factor, configEntries: [
        { name: 'min.insync.replicas', value: String(s.min_insync_replicas) },
        // Kept until Keel trims it: a node with an empty disk rebuilds from the first record.
        { name: 'retention.ms', value: '-1' },
        { name: 'retention.bytes', value: '-1' },
        // One append is one record batch: a batch of commands can carry several messages of up to
        // worker.invoker.message_size_limit (32 MiB) each; Kafka's default is 1 MiB.
        { name: 'max.message.bytes', value: String(MAX_BATCH_BYTES) },
      ] }],
    });
    // A node that found the topic just created by another (two started at once) may ask a broker
    // that does not know it yet (UNKNOWN_TOPIC_OR_PARTITION, retriable): it made such a node exit.
    const meta = await retryingRead(() => admin.fetchTopicMetadata({ topics: [s.topic] }));
    // A topic may have more partitions than Keel uses (made by hand, or grown), never fewer. That
    // every node uses the same count is checked in the group (kafka-membership.ts, fitsGroup).
    const count = meta.topics[0]?.partitions.length ?? 0;
    if (count < s.partitions) {
      throw new KeelError('RT0002', `worker.partitions is ${s.partitions}, but the cluster's log topic ${s.topic} has ${count} partitions: give the topic at least as many (one Kafka partition per Keel partition), or another cluster.log_topic`);
    }
  }

  /**
   * Refuses (RT0002) a store that is no copy of this cluster's log, before the node joins: one a
   * single node wrote with its own log (a cluster node rebuilds an empty store from Kafka), one a
   * node of another topic or Kafka cluster wrote (`cluster-log` beside the store names both, written
   * at a node's first start on it), or one that has read a partition further than its log now goes
   * (the topic made again, the brokers' data lost). Read on, the node would fold another log's
   * records into its copy, or exit once chosen to lead (KEEL0802: a position or offset that the
   * log does not continue), after the group had rebalanced around it.
   */
  async refuseStoreOfAnotherLog(db: Db, path: string): Promise<void> {
    const cursors: Array<Cursor | undefined> = [];
    for (let p = 0; p < this.settings.partitions; p++) {
      const cursor = await logTable.readCursor(db, p);
      const applied = await logTable.readApplied(db, p);
      if (cursor === undefined && applied > 0) {
        throw new KeelError('RT0002', `the worker store ${path} was written by a single node (partition ${p} holds ${applied} commands of its own log), not as a copy of a cluster's Kafka logs: a cluster node starts on an empty store and rebuilds it from Kafka; move the store away or set worker.storage_db.path, or run it without [cluster]`);
      }
      cursors.push(cursor);
    }
    const admin = await this.connectedAdmin();
    const here: StoreLog = { kafka_cluster_id: (await retryingRead(() => admin.describeCluster())).clusterId, log_topic: this.settings.topic };
    const file = join(path, STORE_LOG_FILE);
    const known = readStoreLog(file);
    if (known !== undefined && (known.kafka_cluster_id !== here.kafka_cluster_id || known.log_topic !== here.log_topic)) {
      throw new KeelError('RT0002', `the worker store ${path} is a copy of topic ${known.log_topic} on Kafka cluster ${known.kafka_cluster_id}, and this node is set to topic ${here.log_topic} on Kafka cluster ${here.kafka_cluster_id}: start it on an empty store (it rebuilds from Kafka), or with the cluster it copied`);
    }
    const bounds = await this.logBounds();
    for (const [p, cursor] of cursors.entries()) {
      const end = bounds[p]?.end ?? 0;
      if (cursor !== undefined && cursor.offset > end) {
        throw new KeelError('RT0002', `the worker store ${path} has read partition ${p} of topic ${here.log_topic} to offset ${cursor.offset}, but the topic ends at offset ${end}: it is not the log this store copied (the topic was made again, or the brokers lost their data); start the node on an empty store (it rebuilds from Kafka)`);
      }
    }
    if (known === undefined) {
      // Whole or not at all: a torn file would refuse every later start.
      writeFileSync(`${file}.tmp`, `${JSON.stringify(here)}\n`);
      renameSync(`${file}.tmp`, file);
    }
  }

  /**
   * Where each partition's log starts (0 until it is trimmed) and ends (Kafka's high watermark:
   * the offset its next record gets), by partition.
   */
  async logBounds(): Promise<Array<{ start: number; end: number }>> {
    const admin = await this.connectedAdmin();
    const topic = this.settings.topic;
    // A leader that moved (just elected, a broker gone): kafkajs asked the one its metadata named.
    // The metadata is read again before the offsets are.
    const offsets = await retryingRead(() => admin.fetchTopicOffsets(topic), () => admin.fetchTopicMetadata({ topics: [topic] }));
    const bounds: Array<{ start: number; end: number }> = [];
    for (const o of offsets) bounds[o.partition] = { start: Number(o.low), end: Number(o.high) };
    return bounds;
  }

  /** The first offset the partition's log still holds. */
  async logStart(partition: number): Promise<number> {
    const bounds = (await this.logBounds())[partition];
    assert(bounds !== undefined, () => `the log topic ${this.settings.topic} has no partition ${partition}`);
    return bounds.start;
  }

  /** Drops the partition's records below `offset` (a snapshot covers them). */
  async trim(partition: number, offset: number): Promise<void> {
    await (await this.connectedAdmin()).deleteTopicRecords({ topic: this.settings.topic, partitions: [{ partition, offset: String(offset) }] });
  }

  /**
   * Before a partition's log opens on this node: when the node's copy cannot be read on from the
   * log (it never had the partition, or the log was trimmed past its cursor), loads the newest
   * snapshot, which the log continues. A copy the log continues is kept as it is.
   */
  async restoreIfBehind(db: Db, partition: number): Promise<void> {
    const cursor = await logTable.readCursor(db, partition);
    const start = await this.logStart(partition);
    if (cursor !== undefined && cursor.offset >= start) return;
    const store = this.settings.snapshots;
    const newest = store === undefined ? undefined : (await store.list(partition)).at(-1);
    if (store === undefined || newest === undefined || newest.cursor.offset < start) {
      if (start === 0) return; // nothing trimmed: the log is read from its first record
      throw new KeelError('KEEL0804', `partition ${partition}: its log starts at offset ${start}, this node's copy ends at ${cursor?.offset ?? 'nothing'}, and no snapshot reaches the log (newest: ${newest?.cursor.offset ?? 'none'})`);
    }
    const started = performance.now();
    const { keys } = await restorePartition(db, newest, store);
    this.logger.info({ partition, snapshot: newest.name, offset: newest.cursor.offset, position: newest.cursor.position, keys, log_start: start, took_ms: Math.round(performance.now() - started) }, 'partition restored from a snapshot; the log continues it');
  }

  /** The producer of one Keel partition: idempotent, and transactional (its id the partition's, on every node) where configured. */
  producer(partition: number): Promise<Producer> {
    let producer = this.producers.get(partition);
    if (producer === undefined) {
      const transactionalId = this.settings.transactional ? `keel-${this.settings.topic}-${partition}` : undefined;
      const connecting = connectProducer(() => this.kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1, retry: KAFKA_RETRY }), () => this.closed);
      // Only this one: forget() and a new producer may have replaced it while it retried.
      connecting.catch(() => this.producers.get(partition) === connecting && this.producers.delete(partition));
      this.producers.set(partition, connecting);
      producer = connecting;
    }
    return producer;
  }

  /** Drops a fenced producer: kafkajs cannot take a producer past a fence, the next leadership builds a new one. */
  forget(partition: number): void {
    const producer = this.producers.get(partition);
    this.producers.delete(partition);
    void producer?.then((p) => p.disconnect()).catch(() => undefined);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.producers.values()].map((p) => p.then((x) => x.disconnect()).catch(() => undefined)));
    this.producers.clear();
    await this.admin?.disconnect().catch(() => undefined);
    await this.reader.close();
  }
}

function offsetOf(sent: Array<{ baseOffset?: string } | null | undefined>): number | undefined {
  const offset = Number(sent[0]?.baseOffset);
  return Number.isSafeInteger(offset) && offset >= 0 ? offset : undefined;
}

function entryOf(record: KafkaRecord): LogEntry {
  const epoch = Number(record.headers[HEADER_EPOCH]?.toString('utf8'));
  const position = record.headers[HEADER_POSITION];
  if (position === undefined) return { kind: 'announce', epoch, node: record.headers[HEADER_NODE]?.toString('utf8') ?? '' };
  return { kind: 'command', epoch, position: Number(position.toString('utf8')) };
}

export class KafkaLog implements PartitionLog {
  readonly durable_on_append = true;
  /** What the node's store holds (or will, once the write in flight lands). */
  private applied: Cursor;
  /** Where reading has got to (ahead of `applied` while a caller folds what was read). */
  private readonly seen: Cursor;
  private leading_epoch = 0;

  private constructor(
    private readonly writer: GroupWriter,
    private readonly client: KafkaLogClient,
    readonly partition: number,
    cursor: Cursor,
  ) {
    this.applied = { ...cursor };
    this.seen = { ...cursor };
  }

  static async open(db: Db, partition: number, writer: GroupWriter, client: KafkaLogClient): Promise<KafkaLog> {
    await client.restoreIfBehind(db, partition);
    const applied = await logTable.readApplied(db, partition);
    const cursor = (await logTable.readCursor(db, partition)) ?? { offset: 0, epoch: 0, position: 0 };
    if (cursor.position !== applied) throw new Error(`partition ${partition}: the store applied position ${applied}, its Kafka cursor says ${cursor.position} (a store written by the embedded log?)`);
    return new KafkaLog(writer, client, partition, cursor);
  }

  get applied_position(): number {
    return this.applied.position;
  }

  /** The epoch announced last in what this node has read of the log. */
  get announced_epoch(): number {
    return this.seen.epoch;
  }

  /** The epoch this node leads the partition in (0: not leading). */
  get epoch(): number {
    return this.leading_epoch;
  }

  /**
   * Takes the lead: yields every command this node has not applied, announces a new epoch and
   * yields what came before the announcement (history it continues: its writer led until then).
   * The caller folds what is yielded and passes the last position folded to `advance`; once this
   * ends the node leads and may append. Throws when another node announced an epoch as high
   * meanwhile (the first announcement in the topic wins).
   */
  async *lead(): AsyncGenerator<[position: number, record: Buffer]> {
    assert(this.leading_epoch === 0, () => `partition ${this.partition}: lead() while leading epoch ${this.leading_epoch}`);
    yield* this.readToEnd();
    const epoch = this.seen.epoch + 1;
    // With transactions, this write's transaction fences every earlier producer of the partition.
    const at = await this.write([{ partition: this.partition, value: Buffer.alloc(0), headers: { [HEADER_EPOCH]: String(epoch), [HEADER_NODE]: this.client.settings.node } }]);
    // Without its offset, to the end: acknowledged (acks=all), the announcement is below it.
    yield* this.readToEnd(at === undefined ? 0 : at + 1);
    if (this.seen.epoch !== epoch) throw new LeadershipLostError(`partition ${this.partition}: another node announced epoch ${this.seen.epoch} before this node's ${epoch}`);
    await this.skipRead();
    this.leading_epoch = epoch;
    this.client.epochs.set(this.partition, epoch);
  }

  /**
   * When everything read since the last write held no command to fold (announcements, commit
   * markers, dropped writes), moves the stored cursor past it: the node's copy then ends where
   * the log does (GET /cluster shows no lag), and the next start does not read it again.
   */
  private async skipRead(): Promise<void> {
    if (this.seen.position !== this.applied.position || this.seen.offset === this.applied.offset) return;
    this.applied = { ...this.seen };
    await this.persist([], this.applied);
  }

  /**
   * The commands after what was read, up to the end of the log now (a fetch waits up to 100 ms
   * there). For a node that follows a partition another node leads: `advance` writes what the
   * caller folded.
   */
  async *readNew(): AsyncGenerator<[position: number, record: Buffer]> {
    assert(this.leading_epoch === 0, () => `partition ${this.partition}: readNew() while leading epoch ${this.leading_epoch}`);
    yield* this.readToEnd(0, true);
    await this.skipRead();
  }

  /** Records read by `lead` are folded through `position`: their state writes go to the store with the cursor. */
  async advance(position: number, writes: StateWrite[]): Promise<void> {
    assert(position === this.seen.position, () => `partition ${this.partition}: advance to ${position}, read through ${this.seen.position}`);
    this.applied = { ...this.seen };
    await this.persist(writes, this.applied);
  }

  /**
   * Appends `records` in this node's epoch. Resolves only once they are replicated (acks=all)
   * and known to be kept by every reader: nothing but this node's records since its last write,
   * or no announcement among what came between. Throws (and leads no more) otherwise.
   */
  async append(records: Buffer[], writes: StateWrite[]): Promise<number> {
    const epoch = this.leading_epoch;
    if (epoch === 0) throw new LeadershipLostError(`partition ${this.partition}: this node does not lead it`);
    assert(this.seen.position === this.applied.position, () => `partition ${this.partition}: append with ${this.seen.position - this.applied.position} records read and not applied`);
    const first = this.applied.position + 1;
    const last = first + records.length - 1;
    const messages = records.map((value, i) => ({ partition: this.partition, value, headers: { [HEADER_EPOCH]: String(epoch), [HEADER_POSITION]: String(first + i) } }));
    const base = await this.write(messages);
    if (base !== undefined && (this.client.settings.transactional || base === this.seen.offset)) {
      // Transactions: the fence refused the commit had another leader begun. (The records' commit
      // marker follows them; reading from the first offset past them skips it.)
      this.seen.offset = base + records.length;
      this.seen.position = last;
    } else {
      // Others wrote between this node's writes (or kafkajs did not say where these went): judge
      // what came since, and these records, as readers will.
      for await (const _ of this.readToEnd(base === undefined ? 0 : base + records.length));
      if (this.seen.epoch !== epoch || this.seen.position !== last) {
        this.leading_epoch = 0;
        throw new LeadershipLostError(`partition ${this.partition}: epoch ${this.seen.epoch} was announced before this node's append (epoch ${epoch}): the append is void`);
      }
    }
    this.applied = { ...this.seen };
    await this.persist(writes, this.applied);
    return last;
  }

  /**
   * Produces `messages` (acks=all), in a transaction of their own where so configured; resolves
   * to the first one's offset, or undefined where kafkajs did not say (a send retried across a
   * broker failover can come back without its metadata).
   */
  private async write(messages: Message[]): Promise<number | undefined> {
    const topic = this.client.settings.topic;
    try {
      const producer = await this.client.producer(this.partition);
      if (!this.client.settings.transactional) return offsetOf(await producer.send({ topic, acks: -1, messages }));
      const txn = await producer.transaction();
      try {
        const sent = await txn.send({ topic, acks: -1, messages });
        await txn.commit();
        return offsetOf(sent);
      } catch (err) {
        await txn.abort().catch(() => undefined);
        throw err;
      }
    } catch (err) {
      // kafkajs's producer cannot go on past a fence or a failed transaction: the next leadership builds another.
      this.leading_epoch = 0;
      this.client.forget(this.partition);
      throw err;
    }
  }

  /**
   * Every command from position `from` on, as every reader keeps them, up to what was written
   * when the read began (once the transactions then open have ended).
   */
  async *read(from = 1): AsyncIterable<[position: number, record: Buffer]> {
    const state: EpochState = { epoch: 0, position: 0 };
    let offset = 0;
    let end: number | undefined;
    for (;;) {
      const batch = await this.fetch(offset);
      end ??= batch.high_watermark;
      for (const record of batch.records) {
        if (judge(state, entryOf(record)) === 'keep' && state.position >= from) yield [state.position, record.value];
      }
      offset = batch.next_offset;
      if (offset >= end) return;
    }
  }

  async first_position(): Promise<number> {
    for await (const [position] of this.read(1)) return position;
    return this.applied.position + 1;
  }

  /** Reads on from `seen` until the end committed now (and at least up to `until`), yielding the commands kept. */
  private async *readToEnd(until = 0, shared = false): AsyncGenerator<[position: number, record: Buffer]> {
    for (;;) {
      const batch = await this.fetch(this.seen.offset, shared);
      for (const record of batch.records) {
        const verdict = judge(this.seen, entryOf(record));
        this.seen.offset = record.offset + 1;
        if (verdict === 'keep') yield [this.seen.position, record.value];
      }
      this.seen.offset = Math.max(this.seen.offset, batch.next_offset);
      if (this.seen.offset >= batch.last_stable_offset && this.seen.offset >= until) return;
    }
  }

  /** `shared`: read with the other partitions this node follows (a standby); a leader's reads go alone. */
  private fetch(offset: number, shared = false): ReturnType<KafkaPartitionReader['fetch']> {
    return this.client.reader.fetch(this.partition, offset, { shared });
  }

  private async persist(writes: StateWrite[], cursor: Cursor): Promise<void> {
    // Not synced: the store is a copy of what Kafka holds; a tail lost in a crash is read again.
    await this.writer.write((batch) => {
      for (const [key, value] of writes) {
        if (value === null) batch.del(key);
        else batch.put(key, value);
      }
      batch.put(logTable.appliedKey(this.partition), logTable.encodeApplied(cursor.position));
      batch.put(logTable.cursorKey(this.partition), logTable.encodeCursor(cursor));
    }, false);
  }
}

