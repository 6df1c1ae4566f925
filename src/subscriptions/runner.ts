// One subscription's consumer: records of its topic become invocations of its sink, exactly once.
//
// Keel's log, not Kafka, holds where consumption stands: each chunk of records of one topic
// partition is one `subscription_records` command, appended to the partition that keeps that
// topic partition's position, and its fold moves the position and makes the invocations in one
// batch. When a topic partition is assigned, consumption starts from that stored position; Kafka
// commits only show it to Kafka tools. Chunks of one topic partition are appended one after the
// other, so records of one key reach their object in offset order.
//
// Back-pressure: at most one chunk per topic partition is on its way to the log, and the consumer
// pauses while the subscription's invocations that have not completed exceed the limit (checked
// before each chunk, so it overshoots by one chunk per topic partition at most), or while its sink
// is not registered; a timer resumes it.

import type { Config, KafkaCluster } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import type { InvocationId } from '../common/ids.js';
import { KeelError, isKeelError } from '../errors/index.js';
import { kafkaConsumerSettings, type KafkaConsumerSettings } from '../metadata/kafka-options.js';
import { parseSink, parseSource } from '../metadata/subscriptions.js';
import { resolveTarget } from '../metadata/targets.js';
import type { HandlerSchema, ServiceSchema, SubscriptionSchema } from '../metadata/types.js';
import type { KafkaConsumer, KafkaConsumerHandlers, KafkaRecord, PartitionLag } from './kafka-client.js';
import type { SubscriptionPartitions } from './partitions.js';
import { buildCommand, chunks, positionPartitionKey, type Sink } from './records.js';

/** How often a paused subscription checks whether it may go on. */
const RECHECK_INTERVAL_MS = 50;
/** Lag is read from Kafka at most this often, and given up on after the timeout. */
const LAG_MAX_AGE_MS = 1_000;
const LAG_TIMEOUT_MS = 2_000;

/** What the runner needs of the schema registry. */
export interface SinkLookup {
  handler(service: string, handler: string): { service: ServiceSchema; handler: HandlerSchema } | undefined;
}

export type CreateConsumer = (settings: KafkaConsumerSettings, topic: string, handlers: KafkaConsumerHandlers) => KafkaConsumer;

export interface RunnerDeps {
  config: Config;
  registry: SinkLookup;
  partitions: SubscriptionPartitions;
  logger: Logger;
  createConsumer: CreateConsumer;
}

export type RunnerState = 'starting' | 'consuming' | 'paused' | 'failed' | 'stopped';

/** One topic partition of a subscription, as the admin API and `sys_subscription_partition` show it. */
export interface SubscriptionPartitionStatus {
  partition: number;
  /** Keel's stored position: the offset of the next record to deliver (null: nothing consumed yet). */
  position: number | null;
  /** The offset after the last record in the partition, when Kafka answered. */
  high_watermark: number | null;
  /** `high_watermark - position` (before anything was consumed: from where the consumer starts, when it knows). */
  lag: number | null;
  records_delivered: number;
  records_skipped: number;
  assigned: boolean;
  paused: boolean;
  position_updated_at_ms: number | null;
}

export interface SubscriptionStatus {
  id: string;
  source: string;
  sink: string;
  topic: string;
  consumer_group: string | null;
  state: RunnerState;
  /** Why the consumer is paused or failed, when it is. */
  reason: string | null;
  pending_invocations: number;
  max_pending_invocations: number;
  last_warning: { code: string; message: string; at_ms: number } | null;
  lag_read_at_ms: number | null;
  partitions: SubscriptionPartitionStatus[];
}

type Block = { kind: 'sink' | 'pending'; reason: string };

export class SubscriptionRunner {
  private readonly log: Logger;
  private readonly topic: string;
  private readonly sinkName: { service: string; handler: string };
  private settings: KafkaConsumerSettings | undefined;
  private consumer: KafkaConsumer | undefined;
  private failure: string | undefined;
  private blocked: Block | undefined;
  private recheck: NodeJS.Timeout | undefined;
  private commitTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private lastWarning: SubscriptionStatus['last_warning'] = null;
  private lagCache: { at_ms: number; rows: PartitionLag[] } | undefined;
  private lagReading: Promise<void> | undefined;
  private readonly committed = new Map<number, number>();

  constructor(
    readonly subscription: SubscriptionSchema,
    private readonly cluster: KafkaCluster | undefined,
    private readonly deps: RunnerDeps,
  ) {
    this.log = deps.logger.child({ subscription: subscription.id });
    this.topic = parseSource(subscription.source).topic;
    this.sinkName = parseSink(subscription.sink);
  }

  start(): void {
    try {
      if (this.cluster === undefined) throw new KeelError('META0009', `the Kafka cluster of ${this.subscription.source} is not configured any more`);
      this.settings = kafkaConsumerSettings(this.cluster, this.subscription.options, this.subscription.id);
    } catch (err) {
      this.failure = (err as Error).message;
      this.log.error({ code: isKeelError(err) ? err.code : 'KEEL0701', source: this.subscription.source }, `subscription ${this.subscription.id} cannot consume: ${this.failure}`);
      return;
    }
    if (this.settings.ignored.length > 0) this.log.info({ ignored: this.settings.ignored }, 'Kafka consumer options ignored (Keel keeps positions itself)');
    this.consumer = this.deps.createConsumer(this.settings, this.topic, this.handlers());
    this.consumer.start();
    this.commitTimer = setInterval(() => void this.commitPositions(), Math.max(100, this.settings.commitIntervalMs));
    this.commitTimer.unref();
    this.log.info({ source: this.subscription.source, sink: this.subscription.sink, group: this.settings.groupId, library: this.consumer.library }, 'subscription consuming');
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.recheck);
    clearInterval(this.commitTimer);
    await this.consumer?.stop();
  }

  // ---- the consumer's handlers ----

  private handlers(): KafkaConsumerHandlers {
    return {
      onAssigned: (partitions) => this.onAssigned(partitions),
      onRevoked: (partitions) => this.log.debug({ partitions }, 'Kafka partitions revoked'),
      onRecords: (records) => this.onRecords(records),
      onWarning: (message, detail) => this.warn('KEEL0701', message, detail),
    };
  }

  /** Each assigned topic partition starts at Keel's stored position, when there is one. */
  private onAssigned(partitions: number[]): ReadonlyMap<number, number> {
    const positions = new Map<number, number>();
    for (const p of partitions) {
      const at = this.storedPosition(p)?.next_offset;
      if (at !== undefined) positions.set(p, at);
    }
    this.log.info({ partitions, positions: Object.fromEntries(positions) }, 'Kafka partitions assigned');
    if (this.blocked) this.consumer?.pause(partitions);
    return positions;
  }

  private async onRecords(records: KafkaRecord[]): Promise<void> {
    if (this.stopped) throw new Error('the subscription is stopping');
    const sink = this.resolveSink();
    if (sink === undefined) {
      this.block({ kind: 'sink', reason: `the sink ${this.subscription.sink} is not registered` });
      // Warned about by `block`; the consumer delivers these records again once it resumes.
      throw Object.assign(new KeelError('KEEL0703', `the sink ${this.subscription.sink} of subscription ${this.subscription.id} is not registered`), { quiet: true });
    }
    const p = records[0]!.partition;
    const positionKey = positionPartitionKey(this.subscription.id, this.topic, p);
    // The partition keeping this topic partition's position: here, or led by another node of a cluster.
    const partition = this.deps.partitions.partitionIndexOf(positionKey);
    let first = true;
    for (const chunk of chunks(records)) {
      if (this.stopped) throw new Error('the subscription is stopping');
      // Past the limit, the rest of the batch waits in Kafka: the consumer delivers it again once
      // it resumes (the chunks already in the log are dropped then, below the stored position).
      if (!first && this.checkPending()) throw Object.assign(new Error('paused by back-pressure'), { quiet: true });
      first = false;
      await this.deps.partitions.appendTo(partition, { kind: 'subscription_records', subscription_records: this.command(sink, chunk, positionKey, partition) });
    }
    this.checkPending();
  }

  private command(sink: Sink, chunk: KafkaRecord[], positionKey: bigint, partition: number) {
    const isLocal = (id: InvocationId) => this.deps.partitions.partitionIndexOf(id.partitionKey) === partition;
    return buildCommand(this.subscription.id, sink, chunk, positionKey, isLocal, (s) =>
      this.warn('KEEL0702', `record ${this.topic}/${chunk[0]!.partition}@${s.offset} skipped: ${s.reason}`, { partition: chunk[0]!.partition, offset: s.offset }),
    );
  }

  /** The sink as registered now, or undefined when its service or handler is gone. */
  private resolveSink(): Sink | undefined {
    const found = this.deps.registry.handler(this.sinkName.service, this.sinkName.handler);
    if (found === undefined) return undefined;
    const target = resolveTarget(this.deps.config, found.service, found.handler, '', undefined);
    return { ...this.sinkName, target };
  }

  // ---- pausing ----

  pendingInvocations(): number {
    return this.deps.partitions.pending(this.subscription.id);
  }

  /** Pauses the consumer when the subscription has too many invocations pending; true when it is paused. */
  private checkPending(): boolean {
    if (this.blocked) return true;
    const limit = this.deps.config.ingress.kafka_max_pending_invocations;
    const pending = this.pendingInvocations();
    if (pending < limit) return false;
    this.block({ kind: 'pending', reason: `${pending} of its invocations have not completed (ingress.kafka_max_pending_invocations = ${limit})` });
    return true;
  }

  private block(b: Block): void {
    if (this.blocked || this.stopped) return;
    this.blocked = b;
    this.consumer?.pause(this.consumer.assignment());
    const code = b.kind === 'sink' ? 'KEEL0703' : 'KEEL0704';
    if (b.kind === 'sink') this.warn(code, `consumption paused: ${b.reason}`, {});
    else this.log.info({ code }, `subscription ${this.subscription.id} paused: ${b.reason}`);
    this.recheck = setInterval(() => this.tryResume(), RECHECK_INTERVAL_MS);
  }

  private tryResume(): void {
    const b = this.blocked;
    if (b === undefined || this.stopped) return;
    if (b.kind === 'sink' && this.resolveSink() === undefined) return;
    if (b.kind === 'pending' && this.pendingInvocations() > this.deps.config.ingress.kafka_max_pending_invocations / 2) return;
    this.blocked = undefined;
    clearInterval(this.recheck);
    this.consumer?.resume(this.consumer.assignment());
    this.log.info({ code: b.kind === 'sink' ? 'KEEL0703' : 'KEEL0704' }, `subscription ${this.subscription.id} resumed (it was paused because ${b.reason})`);
  }

  // ---- visibility ----

  private warn(code: string, message: string, detail: Record<string, unknown>): void {
    if (this.stopped) return;
    this.lastWarning = { code, message, at_ms: Date.now() };
    this.log.warn({ code, source: this.subscription.source, sink: this.subscription.sink, ...detail }, `subscription ${this.subscription.id}: ${message}`);
  }

  private storedPosition(kafka_partition: number) {
    return this.deps.partitions.position(this.subscription.id, this.topic, kafka_partition);
  }

  /** Keel's positions of the assigned partitions, shown to Kafka tools (never read back). */
  private async commitPositions(): Promise<void> {
    const consumer = this.consumer;
    if (consumer === undefined || this.stopped) return;
    const changed = new Map<number, number>();
    for (const p of consumer.assignment()) {
      const at = this.storedPosition(p)?.next_offset;
      if (at !== undefined && this.committed.get(p) !== at) changed.set(p, at);
    }
    if (changed.size === 0) return;
    await consumer.commit(changed);
    for (const [p, at] of changed) this.committed.set(p, at);
  }

  /** Kafka's high watermarks, at most LAG_MAX_AGE_MS old; waits LAG_TIMEOUT_MS at most. */
  private async readLag(): Promise<void> {
    const consumer = this.consumer;
    if (consumer === undefined || consumer.assignment().length === 0) return;
    if (this.lagCache && Date.now() - this.lagCache.at_ms < LAG_MAX_AGE_MS) return;
    this.lagReading ??= consumer
      .lag()
      .then((rows) => void (this.lagCache = { at_ms: Date.now(), rows }))
      .catch((err: Error) => this.log.debug({ err }, 'reading the lag failed'))
      .finally(() => (this.lagReading = undefined));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.lagReading, new Promise((r) => (timer = setTimeout(r, LAG_TIMEOUT_MS)))]);
    clearTimeout(timer);
  }

  async status(): Promise<SubscriptionStatus> {
    await this.readLag();
    const assigned = new Set(this.consumer?.assignment() ?? []);
    const paused = new Set(this.consumer?.paused() ?? []);
    const lag = new Map((this.lagCache?.rows ?? []).map((r) => [r.partition, r]));
    const numbers = new Set<number>([...assigned, ...lag.keys(), ...this.storedPartitions()]);
    const partitions = [...numbers].sort((a, b) => a - b).map((p) => this.partitionStatus(p, assigned.has(p), paused.has(p), lag.get(p)));
    return {
      id: this.subscription.id,
      source: this.subscription.source,
      sink: this.subscription.sink,
      topic: this.topic,
      consumer_group: this.settings?.groupId ?? null,
      state: this.state(assigned.size),
      reason: this.failure ?? this.blocked?.reason ?? null,
      pending_invocations: this.pendingInvocations(),
      max_pending_invocations: this.deps.config.ingress.kafka_max_pending_invocations,
      last_warning: this.lastWarning,
      lag_read_at_ms: this.lagCache?.at_ms ?? null,
      partitions,
    };
  }

  private state(assigned: number): RunnerState {
    if (this.stopped) return 'stopped';
    if (this.failure !== undefined) return 'failed';
    if (this.blocked !== undefined) return 'paused';
    return assigned > 0 ? 'consuming' : 'starting';
  }

  /** Topic partitions with a stored position (every Keel partition may keep some). */
  private storedPartitions(): number[] {
    return this.deps.partitions.positions(this.subscription.id, this.topic).map((pos) => pos.kafka_partition);
  }

  private partitionStatus(p: number, assigned: boolean, paused: boolean, kafka: PartitionLag | undefined): SubscriptionPartitionStatus {
    const pos = this.storedPosition(p);
    const position = pos?.next_offset ?? null;
    // Before Keel stored a position, the consumer's own (where it will start) is the best there is.
    let lag: number | null = null;
    if (kafka !== undefined) {
      if (position !== null) lag = Math.max(0, kafka.highWatermark - position);
      else if (kafka.highWatermark === 0) lag = 0; // an empty partition
      else lag = kafka.lag ?? null;
    }
    return {
      partition: p,
      position,
      high_watermark: kafka?.highWatermark ?? null,
      lag,
      records_delivered: pos?.delivered ?? 0,
      records_skipped: pos?.skipped ?? 0,
      assigned,
      paused,
      position_updated_at_ms: pos?.updated_at_ms ?? null,
    };
  }
}
