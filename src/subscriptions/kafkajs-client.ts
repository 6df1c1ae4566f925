// The Kafka consumer behind Keel's interface, on kafkajs 2.2.4 (pure JS, no native code).
//
// kafkajs knows no revocation callback and re-reads the group's committed offsets on every
// rebalance, so this adapter keeps the position of each assigned partition itself (the offset
// after the last record delivered, or where Keel seeked) and, on each GROUP_JOIN, seeks every
// partition it keeps to that position and asks Keel for the positions of the new ones. Records
// below a partition's position (a stale fetch) are dropped before delivery. kafkajs sends
// heartbeats only between batches: while Keel holds a batch, this adapter calls `heartbeat()`
// every `heartbeat.interval.ms`. A crash kafkajs does not restart itself is restarted here, with
// a fresh consumer and backoff, until `stop`.

import { loadKafkajs } from '../log/kafkajs.js';
import type { Admin, Batch, Consumer, Kafka, KafkaConfig, SASLOptions } from 'kafkajs';
import type { KafkaConsumerSettings } from '../metadata/kafka-options.js';
import {
  backoff,
  throttledWarnings,
  type KafkaConsumer,
  type KafkaConsumerHandlers,
  type KafkaRecord,
  type PartitionLag,
} from './kafka-client.js';

/** How long `stop` waits for kafkajs to leave the group and close its connections. */
const STOP_WAIT_MS = 5_000;

export class KafkajsConsumer implements KafkaConsumer {
  readonly library = 'kafkajs';
  private readonly kafka: Kafka;
  private readonly warn: KafkaConsumerHandlers['onWarning'];
  private consumer: Consumer | undefined;
  private admin: Admin | undefined;
  private started = false;
  private stopped = false;
  private attempt = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly assigned = new Set<number>();
  /** Next offset to deliver, per assigned partition, when known. */
  private readonly next = new Map<number, number>();
  /** Bumped by every seek, so a batch in flight does not overwrite the position sought. */
  private readonly seeks = new Map<number, number>();
  private readonly userPaused = new Set<number>();
  /** Assigned, waiting for the positions `onAssigned` answers with a promise. */
  private readonly pending = new Set<number>();

  constructor(
    private readonly settings: KafkaConsumerSettings,
    private readonly topic: string,
    private readonly handlers: KafkaConsumerHandlers,
  ) {
    this.warn = throttledWarnings(handlers.onWarning);
    const { Kafka, logLevel } = loadKafkajs();
    const s = settings;
    const config: KafkaConfig = {
      clientId: s.clientId,
      brokers: s.brokers,
      connectionTimeout: s.connectionTimeoutMs,
      requestTimeout: s.requestTimeoutMs,
      retry: { initialRetryTime: Math.max(1, s.retryBackoffMs), maxRetryTime: Math.max(1, s.retryBackoffMaxMs), retries: 5 },
      logLevel: logLevel.WARN,
      logCreator:
        () =>
        ({ namespace, level, log }) => {
          if (level > logLevel.WARN || this.stopped) return;
          const { message, timestamp: _t, logger: _l, stack: _s, ...rest } = log as Record<string, unknown> & { message: string };
          // A rebalance is routine: kafkajs logs each one as a failed heartbeat and a re-join.
          if (/rebalancing/.test(`${message} ${String(rest.error ?? '')}`)) return;
          this.warn(`kafkajs ${namespace}: ${message}`, { library: this.library, ...rest });
        },
    };
    if (s.tls) {
      config.ssl = {
        ...(s.tls.ca ? { ca: s.tls.ca } : {}),
        ...(s.tls.cert ? { cert: s.tls.cert } : {}),
        ...(s.tls.key ? { key: s.tls.key } : {}),
        ...(s.tls.passphrase ? { passphrase: s.tls.passphrase } : {}),
        rejectUnauthorized: s.tls.rejectUnauthorized,
        ...(s.tls.checkServerIdentity ? {} : { checkServerIdentity: () => undefined }),
      };
    }
    if (s.sasl) config.sasl = { mechanism: s.sasl.mechanism, username: s.sasl.username, password: s.sasl.password } as SASLOptions;
    this.kafka = new Kafka(config);
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    void this.run();
  }

  assignment(): number[] {
    return [...this.assigned].sort((a, b) => a - b);
  }

  pause(partitions: number[]): void {
    for (const p of partitions) this.userPaused.add(p);
    this.consumer?.pause([{ topic: this.topic, partitions }]);
  }

  resume(partitions: number[]): void {
    for (const p of partitions) this.userPaused.delete(p);
    const ready = partitions.filter((p) => !this.pending.has(p));
    if (ready.length) this.consumer?.resume([{ topic: this.topic, partitions: ready }]);
  }

  paused(): number[] {
    return [...this.userPaused].sort((a, b) => a - b);
  }

  seek(partition: number, offset: number): void {
    if (!Number.isSafeInteger(offset) || offset < 0) throw new RangeError(`seek: offset must be a non-negative integer, got ${offset}`);
    if (!this.assigned.has(partition)) return;
    this.next.set(partition, offset);
    this.seeks.set(partition, (this.seeks.get(partition) ?? 0) + 1);
    if (!this.pending.has(partition)) this.consumer?.seek({ topic: this.topic, partition, offset: String(offset) });
  }

  async commit(positions: ReadonlyMap<number, number>): Promise<void> {
    const consumer = this.consumer;
    const partitions = [...positions].filter(([p]) => this.assigned.has(p));
    if (!consumer || partitions.length === 0) return;
    try {
      await consumer.commitOffsets(partitions.map(([partition, offset]) => ({ topic: this.topic, partition, offset: String(offset) })));
    } catch (err) {
      this.warn(`committing positions to Kafka failed (visibility only): ${(err as Error).message}`, { library: this.library, topic: this.topic });
    }
  }

  async lag(): Promise<PartitionLag[]> {
    if (!this.admin) {
      this.admin = this.kafka.admin();
      await this.admin.connect();
    }
    const offsets = await this.admin.fetchTopicOffsets(this.topic);
    return offsets
      .filter((o) => this.assigned.has(o.partition))
      .sort((a, b) => a.partition - b.partition)
      .map((o) => {
        const high = Number(o.high);
        const position = this.next.get(o.partition);
        return { partition: o.partition, position, highWatermark: high, lag: position === undefined ? undefined : Math.max(0, high - position) };
      });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.restartTimer);
    const consumer = this.consumer;
    this.consumer = undefined;
    this.revokeAll();
    // kafkajs waits for a JoinGroup in flight (up to the rebalance timeout) before it leaves:
    // stop waits a few seconds at most and lets that finish in the background.
    const closing = Promise.all([consumer?.disconnect().catch(() => {}), this.admin?.disconnect().catch(() => {})]);
    this.admin = undefined;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([closing, new Promise((r) => (timer = setTimeout(r, STOP_WAIT_MS)))]);
    clearTimeout(timer);
  }

  // ---- internals ----

  private async run(): Promise<void> {
    if (this.stopped) return;
    const s = this.settings;
    const consumer: Consumer = this.kafka.consumer({
      groupId: s.groupId,
      // kafkajs restarts a consumer that crashed on a retriable error by itself, also one that
      // was stopped or replaced in the meantime: that one would reconnect forever.
      retry: { restartOnFailure: async () => !this.stopped && this.consumer === consumer },
      sessionTimeout: s.sessionTimeoutMs,
      heartbeatInterval: s.heartbeatIntervalMs,
      rebalanceTimeout: s.rebalanceTimeoutMs,
      metadataMaxAge: s.metadataMaxAgeMs,
      maxBytesPerPartition: s.maxPartitionFetchBytes,
      minBytes: s.fetchMinBytes,
      maxBytes: s.fetchMaxBytes,
      maxWaitTimeInMs: s.fetchMaxWaitMs,
      allowAutoTopicCreation: s.allowAutoTopicCreation,
      readUncommitted: !s.readCommitted,
      ...(s.rackId !== undefined ? { rackId: s.rackId } : {}),
    });
    this.consumer = consumer;
    consumer.on(consumer.events.GROUP_JOIN, (e) => this.onJoin(consumer, e.payload.memberAssignment[this.topic] ?? []));
    consumer.on(consumer.events.CRASH, (e) => {
      if (consumer !== this.consumer) return;
      const { error, restart } = e.payload;
      this.warn(`Kafka consumer of topic '${this.topic}' failed${restart ? ', kafkajs restarts it' : ''}: ${error.message}`, { library: this.library, topic: this.topic });
      // The member left the group: whatever it had is revoked until the next GROUP_JOIN.
      this.revokeAll();
      if (!restart) this.restart(consumer);
    });
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: [this.topic], fromBeginning: s.autoOffsetReset === 'earliest' });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: 8,
        eachBatch: (p) => this.onBatch(consumer, p.batch, p.resolveOffset, p.heartbeat, p.isStale),
      });
    } catch (err) {
      if (consumer !== this.consumer) return;
      this.warn(`Kafka consumer of topic '${this.topic}' could not start: ${(err as Error).message}`, { library: this.library, topic: this.topic });
      this.restart(consumer);
    }
  }

  private restart(consumer: Consumer): void {
    if (consumer !== this.consumer || this.stopped) return;
    this.consumer = undefined;
    this.revokeAll();
    void consumer.disconnect().catch(() => {});
    const delay = backoff(this.attempt++, this.settings.retryBackoffMs || 100, Math.max(this.settings.retryBackoffMaxMs, 100));
    this.warn(`restarting the Kafka consumer of topic '${this.topic}' in ${delay} ms`, { library: this.library, topic: this.topic });
    this.restartTimer = setTimeout(() => void this.run(), delay);
  }

  private revokeAll(): void {
    if (this.assigned.size === 0) return;
    const revoked = this.assignment();
    this.assigned.clear();
    this.next.clear();
    this.pending.clear();
    this.handlers.onRevoked(revoked);
  }

  private onJoin(consumer: Consumer, partitions: number[]): void {
    if (consumer !== this.consumer) return;
    this.attempt = 0;
    const now = new Set(partitions);
    const revoked = this.assignment().filter((p) => !now.has(p));
    const added = partitions.filter((p) => !this.assigned.has(p)).sort((a, b) => a - b);
    for (const p of revoked) {
      this.assigned.delete(p);
      this.next.delete(p);
      this.pending.delete(p);
    }
    if (revoked.length) this.handlers.onRevoked(revoked);
    // Kept partitions go on from where this member is, not from the group's committed offsets.
    for (const p of this.assigned) {
      const at = this.next.get(p);
      if (at !== undefined && !this.pending.has(p)) consumer.seek({ topic: this.topic, partition: p, offset: String(at) });
    }
    for (const p of added) this.assigned.add(p);
    const paused = [...this.userPaused].filter((p) => now.has(p));
    if (paused.length) consumer.pause([{ topic: this.topic, partitions: paused }]);
    if (added.length === 0) return;

    const seeksAtJoin = new Map(added.map((p) => [p, this.seeks.get(p) ?? 0]));
    const apply = (positions: ReadonlyMap<number, number>) => {
      for (const p of added) {
        if (!this.assigned.has(p)) continue;
        // A seek made while the answer was pending wins over it.
        const at = (this.seeks.get(p) ?? 0) !== seeksAtJoin.get(p) ? this.next.get(p) : positions.get(p);
        if (at === undefined) {
          this.next.delete(p);
          continue;
        }
        this.next.set(p, at);
        consumer.seek({ topic: this.topic, partition: p, offset: String(at) });
      }
    };
    let answer: ReadonlyMap<number, number> | Promise<ReadonlyMap<number, number>>;
    try {
      answer = this.handlers.onAssigned(added);
    } catch (err) {
      this.warn(`onAssigned failed; the partitions start at the group's committed offsets: ${(err as Error).message}`, { library: this.library, topic: this.topic });
      answer = new Map();
    }
    if (!(answer instanceof Promise)) {
      apply(answer);
      return;
    }
    for (const p of added) this.pending.add(p);
    consumer.pause([{ topic: this.topic, partitions: added }]);
    answer
      .catch((err: Error) => {
        this.warn(`onAssigned failed; the partitions start at the group's committed offsets: ${err.message}`, { library: this.library, topic: this.topic });
        return new Map<number, number>();
      })
      .then((positions) => {
        if (consumer !== this.consumer) return;
        const still = added.filter((p) => this.pending.delete(p));
        apply(positions);
        const go = still.filter((p) => !this.userPaused.has(p));
        if (go.length) consumer.resume([{ topic: this.topic, partitions: go }]);
      });
  }

  private async onBatch(
    consumer: Consumer,
    batch: Batch,
    resolveOffset: (offset: string) => void,
    heartbeat: () => Promise<void>,
    isStale: () => boolean,
  ): Promise<void> {
    const p = batch.partition;
    if (consumer !== this.consumer || !this.assigned.has(p) || this.pending.has(p) || this.userPaused.has(p) || isStale()) return;
    const from = this.next.get(p);
    const records: KafkaRecord[] = [];
    for (const m of batch.messages) {
      const offset = Number(m.offset);
      if (from !== undefined && offset < from) continue;
      const headers: Array<[string, Buffer]> = [];
      for (const [name, v] of Object.entries(m.headers ?? {})) {
        for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined) headers.push([name, Buffer.isBuffer(one) ? one : Buffer.from(one)]);
      }
      records.push({ topic: this.topic, partition: p, offset, key: m.key ?? null, value: m.value ?? null, headers, timestamp: Number(m.timestamp) });
    }
    if (records.length === 0) {
      if (from !== undefined && from > 0) resolveOffset(String(from - 1));
      return;
    }
    const seeksBefore = this.seeks.get(p) ?? 0;
    const beat = setInterval(() => void heartbeat().catch(() => {}), Math.max(100, this.settings.heartbeatIntervalMs));
    try {
      await this.handlers.onRecords(records);
    } catch (err) {
      clearInterval(beat);
      if (consumer !== this.consumer || !this.assigned.has(p)) return;
      const delay = Math.min(backoff(0, this.settings.retryBackoffMs || 100, this.settings.retryBackoffMaxMs), this.settings.sessionTimeoutMs / 3);
      if ((err as { quiet?: boolean }).quiet !== true) this.warn(`records were not taken; delivering them again in ${delay} ms: ${(err as Error).message}`, {
        library: this.library,
        topic: this.topic,
        partition: p,
        offset: records[0]!.offset,
      });
      if ((this.seeks.get(p) ?? 0) === seeksBefore) this.seek(p, records[0]!.offset);
      await new Promise((r) => setTimeout(r, delay));
      return;
    } finally {
      clearInterval(beat);
    }
    if (consumer !== this.consumer || !this.assigned.has(p) || (this.seeks.get(p) ?? 0) !== seeksBefore) return;
    this.next.set(p, records[records.length - 1]!.offset + 1);
    resolveOffset(batch.lastOffset());
    await heartbeat().catch(() => {});
  }
}
