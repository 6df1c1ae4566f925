// The metadata log of a cluster: deployments and subscriptions as records of one Kafka topic
// partition (`<log_topic>-meta`, kept forever), which every node reads in full at start and then
// follows.
//
// Updates are conditional: a record names the sequence number it takes (the one after the last
// record its writer had applied), and every reader applies a record only when that number is
// the next one; a record written on a stale view (another node's record took the number first)
// is dropped by all readers alike. A writer learns which happened by reading the topic through
// its own record before it answers: two nodes cannot register conflicting revisions.
import type { Kafka, Producer } from 'kafkajs';
import { atBrokers, connectProducer, KAFKA_RETRY, loadKafkajs } from '../log/kafkajs.js';
import { assert } from '../common/assert.js';
import type { Logger } from '../common/logger.js';
import type { ClusterConfig } from '../config/index.js';
import { KeelError } from '../errors/index.js';
import { KafkaPartitionReader } from '../log/kafka-reader.js';
import { isMetaRecord, type MetaRecord } from './store.js';

/** How often a node looks for metadata other nodes wrote (each look is a fetch that waits up to 100 ms). */
const FOLLOW_INTERVAL_MS = 200;

interface Envelope {
  seq: number;
  node: string;
  record: MetaRecord;
}

export class KafkaMetaLog {
  private readonly reader: KafkaPartitionReader;
  private producer: Promise<Producer> | undefined;
  /** The next offset to read and the sequence number of the last record applied. */
  private offset = 0;
  private seq = 0;
  /** Reads of the topic, one at a time (the follower and the writers' read-backs). */
  private reading: Promise<unknown> = Promise.resolve();
  private follower: NodeJS.Timeout | undefined;
  private closed = false;
  private onRemote: (rec: MetaRecord) => void = () => undefined;

  private constructor(
    private readonly kafka: Kafka,
    private readonly topic: string,
    private readonly node: string,
    private readonly logger: Logger,
  ) {
    this.reader = new KafkaPartitionReader(kafka, topic);
  }

  /** Creates the topic when missing and reads every record in it, in order. */
  static async open(cluster: ClusterConfig, logger: Logger): Promise<{ log: KafkaMetaLog; records: MetaRecord[] }> {
    const { Kafka, logLevel } = loadKafkajs();
    const kafka = new Kafka({ clientId: `keel-${cluster.node_name}-meta`, brokers: cluster.brokers, retry: KAFKA_RETRY, logLevel: logLevel.NOTHING });
    const topic = `${cluster.log_topic}-meta`;
    return atBrokers(`read the cluster metadata (topic ${topic})`, cluster.brokers, async () => {
      await KafkaMetaLog.createTopic(kafka, topic, cluster);
      const log = new KafkaMetaLog(kafka, topic, cluster.node_name, logger);
      const records: MetaRecord[] = [];
      await log.readThrough(-1, (rec) => records.push(rec));
      return { log, records };
    });
  }

  private static async createTopic(kafka: Kafka, topic: string, cluster: ClusterConfig): Promise<void> {
    const admin = kafka.admin();
    await admin.connect();
    try {
      await admin.createTopics({
        waitForLeaders: true,
        topics: [{ topic, numPartitions: 1, replicationFactor: cluster.replication_factor, configEntries: [
          { name: 'min.insync.replicas', value: String(cluster.min_insync_replicas) },
          { name: 'retention.ms', value: '-1' },
          { name: 'retention.bytes', value: '-1' },
        ] }],
      });
    } finally {
      await admin.disconnect();
    }
  }

  /** From now on, records other nodes write are passed to `apply`, in order, as they are read. */
  follow(apply: (rec: MetaRecord) => void): void {
    this.onRemote = apply;
    const tick = (): void => {
      this.follower = setTimeout(() => {
        this.serially(() => this.readThrough(-1, this.onRemote))
          .catch((err: unknown) => this.logger.warn({ err, code: 'KEEL0801' }, 'reading the cluster metadata failed; retrying'))
          .finally(() => {
            if (!this.closed) tick();
          });
      }, FOLLOW_INTERVAL_MS);
    };
    tick();
  }

  /** Reads to the end of the topic now, instead of at the follower's next look. */
  catchUp(): Promise<void> {
    return this.serially(() => this.readThrough(-1, this.onRemote));
  }

  /**
   * Appends `rec` as the next record. Records of other nodes read on the way are passed to the
   * follower's `apply` first. Throws META0018 when another node's record took the place.
   */
  append(rec: MetaRecord): Promise<void> {
    return this.serially(async () => {
      await this.readThrough(-1, this.onRemote);
      const seq = this.seq + 1;
      const envelope: Envelope = { seq, node: this.node, record: rec };
      // A failed connect is tried again by the next append (appends run one at a time).
      this.producer ??= connectProducer(() => this.kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: KAFKA_RETRY }), () => this.closed).catch((err: unknown) => {
        this.producer = undefined;
        throw err;
      });
      const producer = await this.producer;
      const [meta] = await producer.send({ topic: this.topic, acks: -1, messages: [{ partition: 0, value: JSON.stringify(envelope) }] });
      // kafkajs can answer a send retried across a broker failover without the offset: then the
      // record is known by its sequence number and writer (acknowledged, it is below the end).
      const at = Number(meta?.baseOffset);
      const known = Number.isSafeInteger(at);
      let ours = false;
      await this.readThrough(known ? at : -1, (r, env) => {
        if (env.seq === seq && env.node === this.node && (!known || env.offset === at)) ours = true;
        else this.onRemote(r);
      });
      if (!ours) throw new KeelError('META0018', `another node changed the metadata at the same moment (record ${seq} is theirs); nothing was changed: retry`);
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.follower);
    await this.reading.catch(() => undefined);
    await (await this.producer?.catch(() => undefined))?.disconnect().catch(() => undefined);
    await this.reader.close();
  }

  private serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.reading.then(fn, fn);
    this.reading = run.catch(() => undefined);
    return run;
  }

  /**
   * Reads to the end of the topic (and at least through offset `through`), passing each record
   * that takes the next sequence number to `apply`; the others are dropped, as by every reader.
   */
  private async readThrough(through: number, apply: (rec: MetaRecord, env: { seq: number; node: string; offset: number }) => void): Promise<void> {
    for (;;) {
      const batch = await this.reader.fetch(0, this.offset);
      for (const raw of batch.records) {
        this.offset = raw.offset + 1;
        const env = JSON.parse(raw.value.toString('utf8')) as Envelope;
        assert(Number.isSafeInteger(env.seq) && isMetaRecord(env.record), () => `${this.topic} offset ${raw.offset}: not a metadata record`);
        if (env.seq !== this.seq + 1) continue; // written on a stale view: every reader drops it
        this.seq = env.seq;
        apply(env.record, { seq: env.seq, node: env.node, offset: raw.offset });
      }
      this.offset = Math.max(this.offset, batch.next_offset);
      if (this.offset > through && this.offset >= batch.high_watermark) return;
    }
  }
}
