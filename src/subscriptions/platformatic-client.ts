// The Kafka consumer behind Keel's interface, on @platformatic/kafka 1.x (pure JS; the 2.x line
// needs Node >= 22.22 and Keel runs on Node 20).
//
// Measured (see test/kafka-client.test.mjs): this library needs brokers of Kafka 3.5 or later
// (ApiVersions v3, Fetch v12+, flexible versions) and refuses librdkafka's mock cluster at the
// first request, so only its failure path is exercised here; the rest is written to the same
// contract and type-checked, not run against a broker.
//
// Its message stream consumes every assigned partition and has no per-partition pause or seek:
// it runs in MANUAL mode, a seek rewrites the stream's next fetch offset, and records of a paused
// partition (or of one waiting for a seek to land) are dropped and fetched again on resume.

import { Consumer, MessagesStreamModes, type Message, type MessagesStream } from '@platformatic/kafka';
import type { KafkaConsumerSettings } from '../metadata/kafka-options.js';
import {
  backoff,
  throttledWarnings,
  type KafkaConsumer,
  type KafkaConsumerHandlers,
  type KafkaRecord,
  type PartitionLag,
} from './kafka-client.js';

type Msg = Message<Buffer, Buffer, Buffer, Buffer>;

/** Records buffered across partitions before the stream is paused. */
const MAX_BUFFERED = 10_000;

export class PlatformaticConsumer implements KafkaConsumer {
  readonly library = '@platformatic/kafka';
  private readonly warn: KafkaConsumerHandlers['onWarning'];
  private consumer: Consumer<Buffer, Buffer, Buffer, Buffer> | undefined;
  private stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined;
  private started = false;
  private stopped = false;
  private attempt = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly assigned = new Set<number>();
  private readonly next = new Map<number, number>();
  /** Partitions whose next fetch was rewritten; records until the sought offset are dropped. */
  private readonly seeking = new Map<number, { offset: number; tries: number }>();
  private readonly userPaused = new Set<number>();
  private readonly pending = new Set<number>();
  private readonly queues = new Map<number, KafkaRecord[]>();
  private readonly draining = new Set<number>();
  private buffered = 0;

  constructor(
    private readonly settings: KafkaConsumerSettings,
    private readonly topic: string,
    private readonly handlers: KafkaConsumerHandlers,
  ) {
    this.warn = throttledWarnings(handlers.onWarning);
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
    for (const p of partitions) {
      this.userPaused.add(p);
      this.dropQueue(p);
    }
  }

  resume(partitions: number[]): void {
    for (const p of partitions) {
      if (!this.userPaused.delete(p)) continue;
      const at = this.next.get(p);
      if (at !== undefined && this.assigned.has(p) && !this.pending.has(p)) this.rewind(p, at);
    }
  }

  paused(): number[] {
    return [...this.userPaused].sort((a, b) => a - b);
  }

  seek(partition: number, offset: number): void {
    if (!Number.isSafeInteger(offset) || offset < 0) throw new RangeError(`seek: offset must be a non-negative integer, got ${offset}`);
    if (!this.assigned.has(partition)) return;
    this.dropQueue(partition);
    this.next.set(partition, offset);
    if (!this.pending.has(partition)) this.rewind(partition, offset);
  }

  async commit(positions: ReadonlyMap<number, number>): Promise<void> {
    const consumer = this.consumer;
    const offsets = [...positions]
      .filter(([p]) => this.assigned.has(p))
      .map(([partition, offset]) => ({ topic: this.topic, partition, offset: BigInt(offset), leaderEpoch: -1 }));
    if (!consumer || offsets.length === 0) return;
    try {
      await consumer.commit({ offsets });
    } catch (err) {
      this.warn(`committing positions to Kafka failed (visibility only): ${(err as Error).message}`, { library: this.library, topic: this.topic });
    }
  }

  async lag(): Promise<PartitionLag[]> {
    const consumer = this.consumer;
    if (!consumer) throw new Error('the Kafka consumer is not connected');
    const offsets = await consumer.listOffsets({ topics: [this.topic] });
    const highs = offsets.get(this.topic) ?? [];
    return this.assignment().map((partition) => {
      const high = Number(highs[partition] ?? 0n);
      const position = this.next.get(partition);
      return { partition, position, highWatermark: high, lag: position === undefined ? undefined : Math.max(0, high - position) };
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.restartTimer);
    await this.teardown();
  }

  // ---- internals ----

  private async run(): Promise<void> {
    if (this.stopped) return;
    const s = this.settings;
    const consumer = new Consumer<Buffer, Buffer, Buffer, Buffer>({
      clientId: s.clientId,
      bootstrapBrokers: s.brokers,
      groupId: s.groupId,
      sessionTimeout: s.sessionTimeoutMs,
      heartbeatInterval: s.heartbeatIntervalMs,
      rebalanceTimeout: s.rebalanceTimeoutMs,
      connectTimeout: s.connectionTimeoutMs,
      requestTimeout: s.requestTimeoutMs,
      retries: 5,
      retryDelay: Math.max(1, s.retryBackoffMs),
      metadataMaxAge: s.metadataMaxAgeMs,
      autocreateTopics: s.allowAutoTopicCreation,
      minBytes: s.fetchMinBytes,
      maxBytes: s.fetchMaxBytes,
      maxBytesPerPartition: s.maxPartitionFetchBytes,
      maxWaitTime: s.fetchMaxWaitMs,
      isolationLevel: s.readCommitted ? 1 : 0,
      autocommit: false,
      ...(s.tls
        ? {
            tls: {
              ...(s.tls.ca ? { ca: s.tls.ca } : {}),
              ...(s.tls.cert ? { cert: s.tls.cert } : {}),
              ...(s.tls.key ? { key: s.tls.key } : {}),
              ...(s.tls.passphrase ? { passphrase: s.tls.passphrase } : {}),
              rejectUnauthorized: s.tls.rejectUnauthorized,
              ...(s.tls.checkServerIdentity ? {} : { checkServerIdentity: () => undefined }),
            },
          }
        : {}),
      ...(s.sasl
        ? { sasl: { mechanism: ({ plain: 'PLAIN', 'scram-sha-256': 'SCRAM-SHA-256', 'scram-sha-512': 'SCRAM-SHA-512' } as const)[s.sasl.mechanism], username: s.sasl.username, password: s.sasl.password } }
        : {}),
    });
    this.consumer = consumer;
    consumer.on('consumer:group:join', (payload) => {
      const mine = payload.assignments?.find((a) => a.topic === this.topic)?.partitions ?? [];
      void this.onJoin(consumer, mine);
    });
    consumer.on('consumer:heartbeat:error', (payload) => {
      if (consumer === this.consumer) this.warn(`Kafka heartbeat failed: ${payload.error.message}`, { library: this.library, topic: this.topic });
    });
    try {
      const stream = await consumer.consume({ topics: [this.topic], mode: MessagesStreamModes.MANUAL, offsets: [], autocommit: false });
      if (consumer !== this.consumer) {
        await stream.close().catch(() => {});
        return;
      }
      this.stream = stream;
      stream.on('data', (m: Msg) => this.onMessage(m));
      stream.on('error', (err: Error) => this.fail(consumer, err));
      stream.on('close', () => {
        if (consumer === this.consumer && !this.stopped) this.fail(consumer, new Error('the message stream closed'));
      });
    } catch (err) {
      this.fail(consumer, err as Error);
    }
  }

  private fail(consumer: Consumer<Buffer, Buffer, Buffer, Buffer>, err: Error): void {
    if (consumer !== this.consumer || this.stopped) return;
    const detail = err instanceof AggregateError ? `${err.message}: ${err.errors.map((e: Error) => e.message).join('; ')}` : err.message;
    this.warn(`Kafka consumer of topic '${this.topic}' failed: ${detail}`, { library: this.library, topic: this.topic });
    void this.teardown();
    const delay = backoff(this.attempt++, this.settings.retryBackoffMs || 100, Math.max(this.settings.retryBackoffMaxMs, 100));
    this.warn(`restarting the Kafka consumer of topic '${this.topic}' in ${delay} ms`, { library: this.library, topic: this.topic });
    this.restartTimer = setTimeout(() => void this.run(), delay);
  }

  private async teardown(): Promise<void> {
    const consumer = this.consumer;
    const stream = this.stream;
    this.consumer = undefined;
    this.stream = undefined;
    this.revoke(this.assignment());
    const closing = (async () => {
      await stream?.close().catch(() => {});
      if (consumer) await new Promise<void>((resolve) => consumer.close(true, () => resolve()));
    })();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([closing, new Promise((r) => (timer = setTimeout(r, 5_000)))]);
    clearTimeout(timer);
  }

  private revoke(partitions: number[]): void {
    if (partitions.length === 0) return;
    for (const p of partitions) {
      this.assigned.delete(p);
      this.next.delete(p);
      this.pending.delete(p);
      this.seeking.delete(p);
      this.dropQueue(p);
    }
    this.handlers.onRevoked(partitions);
  }

  private async onJoin(consumer: Consumer<Buffer, Buffer, Buffer, Buffer>, partitions: number[]): Promise<void> {
    if (consumer !== this.consumer) return;
    this.attempt = 0;
    const now = new Set(partitions);
    this.revoke(this.assignment().filter((p) => !now.has(p)));
    const added = partitions.filter((p) => !this.assigned.has(p)).sort((a, b) => a - b);
    for (const p of this.assigned) {
      const at = this.next.get(p);
      if (at !== undefined && !this.pending.has(p)) this.rewind(p, at);
    }
    for (const p of added) {
      this.assigned.add(p);
      this.pending.add(p);
    }
    if (added.length === 0) return;
    let positions: ReadonlyMap<number, number>;
    try {
      positions = await this.handlers.onAssigned(added);
    } catch (err) {
      this.warn(`onAssigned failed; the partitions start at the group's committed offsets: ${(err as Error).message}`, { library: this.library, topic: this.topic });
      positions = new Map();
    }
    // Where Keel has no position: the group's committed offset, else auto.offset.reset.
    const unknown = added.filter((p) => !positions.has(p));
    const start = new Map(positions);
    if (unknown.length) {
      try {
        const committed = (await consumer.listCommittedOffsets({ topics: [{ topic: this.topic, partitions: unknown }] })).get(this.topic) ?? [];
        const ends = (
          await consumer.listOffsets({ topics: [this.topic], timestamp: this.settings.autoOffsetReset === 'earliest' ? -2n : -1n })
        ).get(this.topic) ?? [];
        for (const p of unknown) {
          const c = committed[p];
          start.set(p, Number(c !== undefined && c >= 0n ? c : (ends[p] ?? 0n)));
        }
      } catch (err) {
        this.fail(consumer, err as Error);
        return;
      }
    }
    if (consumer !== this.consumer) return;
    for (const p of added) {
      if (!this.pending.delete(p)) continue;
      const at = start.get(p)!;
      this.next.set(p, at);
      if (!this.userPaused.has(p)) this.rewind(p, at);
    }
  }

  /** Makes the stream fetch `p` from `offset` next. */
  private rewind(p: number, offset: number): void {
    this.seeking.set(p, { offset, tries: 0 });
    this.stream?.offsetsToFetch.set(`${this.topic}:${p}`, BigInt(offset));
  }

  private onMessage(m: Msg): void {
    const p = m.partition;
    if (!this.assigned.has(p) || this.pending.has(p) || this.userPaused.has(p)) return;
    const offset = Number(m.offset);
    const seek = this.seeking.get(p);
    if (seek) {
      if (offset < seek.offset) return;
      if (offset > seek.offset && seek.tries < 3) {
        // A fetch that was in flight before the seek: fetch again from the offset sought.
        seek.tries++;
        this.stream?.offsetsToFetch.set(`${this.topic}:${p}`, BigInt(seek.offset));
        return;
      }
      this.seeking.delete(p);
    }
    const from = this.next.get(p);
    if (from !== undefined && offset < from) return;
    const headers: Array<[string, Buffer]> = [];
    for (const [k, v] of m.headers) headers.push([Buffer.isBuffer(k) ? k.toString('utf8') : String(k), Buffer.isBuffer(v) ? v : Buffer.from(String(v ?? ''))]);
    const record: KafkaRecord = { topic: this.topic, partition: p, offset, key: m.key ?? null, value: m.value ?? null, headers, timestamp: Number(m.timestamp) };
    this.next.set(p, offset + 1);
    let q = this.queues.get(p);
    if (!q) this.queues.set(p, (q = []));
    q.push(record);
    if (++this.buffered >= MAX_BUFFERED) this.stream?.pause();
    if (!this.draining.has(p)) void this.drain(p);
  }

  private async drain(p: number): Promise<void> {
    this.draining.add(p);
    try {
      for (;;) {
        const q = this.queues.get(p);
        if (!q || q.length === 0) return;
        this.queues.delete(p);
        this.release(q.length);
        try {
          await this.handlers.onRecords(q);
        } catch (err) {
          if (!this.assigned.has(p)) return;
          const delay = backoff(0, this.settings.retryBackoffMs || 100, this.settings.retryBackoffMaxMs);
          this.warn(`records were not taken; delivering them again in ${delay} ms: ${(err as Error).message}`, {
            library: this.library,
            topic: this.topic,
            partition: p,
            offset: q[0]!.offset,
          });
          this.dropQueue(p);
          this.next.set(p, q[0]!.offset);
          this.pending.add(p);
          await new Promise((r) => setTimeout(r, delay));
          if (!this.pending.delete(p) || !this.assigned.has(p)) return;
          if (!this.userPaused.has(p)) this.rewind(p, q[0]!.offset);
          return;
        }
      }
    } finally {
      this.draining.delete(p);
    }
  }

  /** Forgets the records of `p` not yet delivered; its position goes back to the first of them. */
  private dropQueue(p: number): void {
    const q = this.queues.get(p);
    if (!q) return;
    this.queues.delete(p);
    this.release(q.length);
    if (q.length && this.next.has(p)) this.next.set(p, q[0]!.offset);
  }

  private release(n: number): void {
    const was = this.buffered;
    this.buffered -= n;
    if (was >= MAX_BUFFERED && this.buffered < MAX_BUFFERED) this.stream?.resume();
  }
}
