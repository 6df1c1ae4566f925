import type { Config } from '../config/index.js';
import { InvocationId, partitionIndexOf, randomKeyOfPartition, randomPartitionKey } from '../common/ids.js';
import type { RuleBook } from '../common/limit-rules.js';
import { limitRulesCommand } from './fold/limit-rules.js';
import { assert } from '../common/assert.js';
import type { Logger } from '../common/logger.js';
import { keelError } from '../errors/index.js';
import { decodeCommand, encodeCommand, type Command, type CommandKind } from '../log/commands.js';
import { GroupWriter, type StoreWriteObserver } from '../storage/group-writer.js';
import { KafkaLog, type KafkaLogClient } from '../log/kafka-log.js';
import { isTransientKafkaError } from '../log/kafkajs.js';
import type { Db, StateWrite } from '../storage/store.js';
import { invocationsTable } from '../storage/tables/invocations.js';
import { journalTable, type JournalEntry } from '../storage/tables/journal.js';
import { outboxTable } from '../storage/tables/outbox.js';
import { liveTable } from '../storage/tables/live.js';
import { locksTable } from '../storage/tables/locks.js';
import { promisesTable, type PromiseState } from '../storage/tables/promises.js';
import { schedulesTable, type ScheduleRecord } from '../storage/tables/schedules.js';
import { stateTable } from '../storage/tables/state.js';
import { subscriptionPositionsTable, type SubscriptionPosition } from '../storage/tables/subscription-positions.js';
import { vqueueMetaTable } from '../storage/tables/vqueue-meta.js';
import { standaloneTelemetry, type CompletionOutcome, type KeelMetrics, type Telemetry } from '../telemetry/index.js';
import { KILLED_FAILURE } from './fold/manage.js';
import { PartitionProcessor, type AttemptHost, type Effects, type PartitionFailure } from './processor.js';
import { splitObjectKey, type Action, type InvocationStatus, type OutboxEntry, type PartitionState, type Timer } from './state.js';
import { Cleaner } from './cleaner.js';
import { Shuffle } from './shuffle.js';
import { TimerWindow } from './timers.js';
import { NotLedHereError, PartitionMovedError } from './errors.js';

/**
 * What the worker hands attempts to: the invoker implements it. Defined here so that the
 * partition layer does not depend on the invoker above it.
 */
export interface AttemptRunner {
  start(host: AttemptHost, id: string, epoch: number): void;
  forward(id: string, epoch: number, type: number, payload: Uint8Array): void;
  abort(id: string): void;
  reject(host: AttemptHost, action: Extract<Action, { kind: 'reject' }>): void;
  stop(): void;
}

/** How commands reach partitions open elsewhere (other nodes, over HTTP: cluster-append.ts; other workers: BatchAppender). */
export interface RemotePartitions {
  /** Where the partition is open now (a node's or a thread's name), or undefined while none is known. */
  leaderOf(partition: number): string | undefined;
  /** Appends an encoded command to a partition open elsewhere; resolves once it is durable there. In order per destination. */
  append(partition: number, command: Buffer): Promise<void>;
}

/** A client waiting for an invocation's result. */
interface Waiter {
  resolve: (s: InvocationStatus) => void;
  reject: (err: Error) => void;
}

/** The route of outbox entries to partitions open here. */
const LOCAL_ROUTE = '';

/**
 * Invocation statuses a durable batch wrote: the status as stored (JSON), or null when the
 * invocation was purged.
 */
export type InvocationChanges = Array<[id: string, status: Buffer | null]>;
export type InvocationListener = (changes: InvocationChanges) => void;

/** What one partition holds of Kafka subscriptions: its invocations not completed by subscription, and positions it wrote. */
export interface SubscriptionChanges {
  partition: number;
  pending: Readonly<Record<string, number>>;
  positions: SubscriptionPosition[];
}
export type SubscriptionListener = (changes: SubscriptionChanges) => void;

/**
 * Bytes of statuses per chunk of `scanInvocationLines`. Each record is copied into its chunk as it
 * is read and dropped: held across the engine's apply instead, the records outlived two young
 * collections and were promoted, and the server's heap kept ~70 MB of them after loading 200,000.
 */
const LINES_PER_CHUNK_BYTES = 1024 * 1024;

/** setTimeout takes at most a signed 32-bit delay; longer timers are re-armed in steps. */
const MAX_TIMEOUT_MS = 2_147_483_647;

const MAX_WAITERS_PER_INVOCATION = 10_000;

/** What an open of partitions did: those of the asked that are open now, and (present only then) why another did not open. */
export interface PartitionsOpened {
  opened: number[];
  failure?: unknown;
}

/**
 * The worker: every partition processor of this node and, per partition, one component per job
 * — its TimerWindow (durable timers due next), its Shuffle (outbox delivery), the Cleaner
 * (retention) — and the clients waiting for results. It routes an invocation to the partition
 * that owns its partition key and carries out what the folds ask for.
 */
export class Worker implements Effects {
  /** The partitions open on this node, in partition order (every one on a single node; those it leads in a cluster). */
  readonly processors: PartitionProcessor[] = [];
  /** The open partitions by partition index. */
  private readonly byPartition: Array<PartitionProcessor | undefined> = [];
  private runner: AttemptRunner | undefined;
  private readonly waiters = new Map<string, Waiter[]>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private stopped = false;
  private cleaner: Cleaner | undefined;
  private db: Db | undefined;
  private writer: GroupWriter | undefined;
  private kafkaLog: KafkaLogClient | undefined;
  private readonly invocationListeners = new Set<InvocationListener>();
  private readonly subscriptionListeners = new Set<SubscriptionListener>();
  /** The pending counts each partition last told the subscription listeners of. */
  private readonly pendingTold = new Map<number, Readonly<Record<string, number>>>();
  private readonly failureListeners = new Set<(failure: PartitionFailure) => void>();
  /** Per open partition, the delivery of its outbox to the others. */
  private readonly shuffles = new Map<number, Shuffle>();
  /** Per open partition, the durable timers due next (the rest stay in the store). */
  private readonly timerWindows = new Map<number, TimerWindow>();
  /** Partitions other nodes lead (a cluster with the partitions spread). */
  private remote: RemotePartitions | undefined;
  /** Partitions another node leads that this one follows (a cluster): their state as folded here, for reads. */
  private readonly replicas = new Map<number, PartitionState>();
  /** Per source and target partition, the route outbox entries in flight took, and how many there are. */
  private readonly channels = new Map<number, { route: string; in_flight: number }>();

  constructor(
    private readonly config: Config,
    private readonly logger: Logger,
    private readonly telemetry: Telemetry = standaloneTelemetry(),
    /** The partitions this worker answers for, opens by default and scans (every one unless several workers share the store). */
    private readonly owned: readonly number[] = Array.from({ length: config.worker.partitions }, (_, p) => p),
  ) {
    assert(owned.every((p, i) => Number.isInteger(p) && p >= 0 && p < config.worker.partitions && (i === 0 || p > owned[i - 1]!)), () => `a worker's partitions are distinct indexes below ${config.worker.partitions}, in order: [${owned.join(', ')}]`);
  }

  /**
   * Opens `partitions` (default: every one): on the embedded log in `db`, or on the cluster's
   * Kafka log (`kafkaLog`, in a cluster). More can be opened, and any closed, later.
   */
  async open(db: Db, kafkaLog?: KafkaLogClient, partitions: readonly number[] = this.allPartitions()): Promise<PartitionsOpened> {
    assert((kafkaLog !== undefined) === (this.config.cluster !== undefined), () => 'a cluster node opens its partitions on the Kafka log, a single node on its own');
    this.useStore(db);
    this.writer ??= new GroupWriter(db, storeWriteObserver(this.telemetry.metrics));
    this.kafkaLog = kafkaLog;
    return this.openPartitions(partitions);
  }

  /** The store the partitions live in (before any opens: reads of partitions followed here go to it). */
  useStore(db: Db): void {
    assert(this.db === undefined || this.db === db, () => 'the worker opened on a second store');
    this.db = db;
  }

  /** A partition this node follows while another node leads it: its state as folded here (undefined: no longer followed). */
  setReplica(partition: number, state: PartitionState | undefined): void {
    if (state === undefined) this.replicas.delete(partition);
    else this.replicas.set(partition, state);
  }

  /** The state of every partition this node holds, led or followed, in partition order: what reads see. */
  views(): Array<{ partition: number; state: PartitionState }> {
    const out = this.processors.map((p) => ({ partition: p.partition, state: p.state }));
    for (const [partition, state] of this.replicas) if (this.byPartition[partition] === undefined) out.push({ partition, state });
    return out.sort((a, b) => a.partition - b.partition);
  }

  /** For reads: the state of the partition owning a key, led or followed here; throws KEEL0805 where neither. */
  viewOf(partitionKey: bigint): PartitionState {
    const index = this.partitionIndexOf(partitionKey);
    return this.byPartition[index]?.state ?? this.replicas.get(index) ?? notLedHere(index);
  }

  /** The partitions this worker answers for, in order: every index of the configuration unless it was given some. */
  allPartitions(): number[] {
    return [...this.owned];
  }

  /**
   * Opens partitions not open yet; once the worker has started, they start at once. Each that
   * opens is kept though another fails (it announced its epoch, so it is led here): the answer
   * says which of `partitions` are open now, and why one of the others is not.
   */
  async openPartitions(partitions: readonly number[]): Promise<PartitionsOpened> {
    const db = this.db;
    assert(db !== undefined, () => 'openPartitions before open');
    const wanted = partitions.filter((p) => this.byPartition[p] === undefined);
    for (const p of wanted) assert(this.owned.includes(p), () => `partition ${p} is not one of this worker's (${this.owned.join(', ')} of ${this.config.worker.partitions})`);
    const writer = this.writer!;
    const client = this.kafkaLog;
    const options = {
      fsync: this.config.worker.storage_db.fsync,
      log_retained_records: this.config.worker.storage_db.log_retained_records,
      state_cache_bytes: stateCacheBytesPerPartition(this.config),
      effects: this,
      logger: this.logger,
      metrics: this.telemetry.metrics,
      observe: (partition: number, writes: readonly StateWrite[]) => this.observeBatch(partition, writes),
      ...(client !== undefined ? { openLog: (p: number) => KafkaLog.open(db, p, writer, client) } : {}),
    };
    const settled = await Promise.allSettled(wanted.map((p) => PartitionProcessor.open(db, writer, p, { ...options, owns: (key) => this.partitionIndexOf(key) === p })));
    const opened = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    for (const p of opened) {
      assert(this.byPartition[p.partition] === undefined, () => `partition ${p.partition} opened twice`);
      this.byPartition[p.partition] = p;
      this.processors.push(p);
      const fire = (t: Timer): Promise<void> => p.append({ kind: 'timer_fired', timer_fired: { invocation_id: InvocationId.parse(t.id)!.bytes, completion_id: t.completion_id, wake_up_ms: t.wake_up_ms, kind: t.kind } });
      this.timerWindows.set(p.partition, new TimerWindow(db, p.partition, this.config.worker.num_timers_in_memory_limit, fire, this.logger));
      this.shuffles.set(p.partition, new Shuffle(p.partition, { read: (from_seq, limit) => outboxTable.read(db, p.partition, from_seq, limit), send: (e) => this.send(p, e) }, this.logger));
      if (this.runner !== undefined) this.startPartition(p);
    }
    this.processors.sort((a, b) => a.partition - b.partition);
    const rejected = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    const open = partitions.filter((p) => this.byPartition[p] !== undefined);
    if (rejected.length === 0) return { opened: open };
    // The answer carries one reason: one that is no passing trouble with Kafka where there is one
    // (a cluster node tries a takeover again only when every partition that failed did so for such a reason).
    const failed = rejected.find((r) => !isTransientKafkaError(r.reason)) ?? rejected[0]!;
    return { opened: open, failure: failed.reason ?? new Error('a partition did not open (no reason given)') };
  }

  /**
   * Closes one open partition (another node leads it from now on): its timers, outbox delivery
   * and attempts stop, what it appended is written. Clients waiting here for one of its
   * invocations keep waiting: `awaitElsewhere` answers them once the partition is led elsewhere.
   */
  async closePartition(partition: number): Promise<void> {
    const p = this.byPartition[partition];
    if (p === undefined) return;
    // Batches still being written run no action but completions from here on (`execute`).
    p.retire();
    this.byPartition[partition] = undefined;
    this.processors.splice(this.processors.indexOf(p), 1);
    this.timerWindows.get(partition)?.stop();
    this.timerWindows.delete(partition);
    this.shuffles.get(partition)?.stop();
    this.shuffles.delete(partition);
    for (const id of p.state.invocations.keys()) this.runner?.abort(id);
    await p.close();
    // And any attempt the batches written meanwhile had under way.
    for (const id of p.state.invocations.keys()) this.runner?.abort(id);
    // Clients waiting here for its invocations get their results from the next leader.
    for (const [id, list] of this.waiters) {
      if (this.partitionIndexOf(InvocationId.parse(id)!.partitionKey) !== partition) continue;
      this.waiters.delete(id);
      for (const w of list) w.reject(new PartitionMovedError(partition, id));
    }
  }

  /** The partition's processor where it is open here. */
  processor(partition: number): PartitionProcessor | undefined {
    return this.byPartition[partition];
  }

  /** Whether this node has the partition open (leads it, in a cluster). */
  leads(partition: number): boolean {
    return this.byPartition[partition] !== undefined;
  }

  /** Durable timers held in memory, by partition (each at most worker.num_timers_in_memory_limit). */
  timersInMemory(): number[] {
    const out: number[] = [];
    for (const [p, w] of this.timerWindows) out[p] = w.size;
    return out;
  }

  /** Starts the invoker on the recovered state: running attempts restart, timers re-arm. */
  start(runner: AttemptRunner): void {
    this.runner = runner;
    for (const p of this.processors) this.startPartition(p);
    this.cleaner = new Cleaner(this.db!, this.processors, this.logger);
    this.cleaner.start(this.config.worker.cleanup_interval_ms);
  }

  private startPartition(p: PartitionProcessor): void {
    p.start();
    this.timerWindows.get(p.partition)!.start();
    this.shuffles.get(p.partition)!.start();
  }

  /** Called with each partition that stops from now on (`failures()` lists them); returns the stop function. */
  onFailure(listener: (failure: PartitionFailure) => void): () => void {
    this.failureListeners.add(listener);
    return () => this.failureListeners.delete(listener);
  }

  halted(failure: PartitionFailure): void {
    for (const listener of this.failureListeners) listener(failure);
  }

  /** Partitions that stopped on a broken invariant or a failed write (empty when all run). */
  failures(): PartitionFailure[] {
    return this.processors.flatMap((p) => (p.health ? [p.health] : []));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.cleaner?.stop();
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    for (const w of this.timerWindows.values()) w.stop();
    for (const s of this.shuffles.values()) s.stop();
    this.runner?.stop();
    await Promise.all(this.processors.map((p) => p.close()));
  }

  /** The partition that owns a partition key. */
  partitionIndexOf(partitionKey: bigint): number {
    return partitionIndexOf(partitionKey, this.config.worker.partitions);
  }

  /** The open partition that owns a partition key; throws KEEL0805 when another node leads it. */
  partitionOf(partitionKey: bigint): PartitionProcessor {
    const index = this.partitionIndexOf(partitionKey);
    return this.byPartition[index] ?? notLedHere(index);
  }

  /**
   * A random partition key of a partition open here (of any partition when all or none are):
   * a new invocation of a plain service, which any partition may hold, starts where it was asked.
   */
  localPartitionKey(): bigint {
    const open = this.processors.length;
    if (open === 0 || open === this.config.worker.partitions) return randomPartitionKey();
    const p = this.processors[Math.floor(Math.random() * open)]!.partition;
    const key = randomKeyOfPartition(p, this.config.worker.partitions);
    assert(this.partitionIndexOf(key) === p, () => `key ${key} drawn for partition ${p} falls in ${this.partitionIndexOf(key)}`);
    return key;
  }

  processorFor(id: InvocationId): PartitionProcessor {
    return this.partitionOf(id.partitionKey);
  }

  append(id: InvocationId, kind: CommandKind): Promise<void> {
    return this.processorFor(id).append(kind);
  }

  /**
   * Appends to a partition wherever it is led: here, or through `remote` on the node leading it
   * (a cluster with the partitions spread). Resolves once the command is durable.
   */
  appendTo(partition: number, kind: CommandKind): Promise<void> {
    const here = this.byPartition[partition];
    if (here !== undefined) return here.append(kind);
    if (this.remote === undefined || this.remote.leaderOf(partition) === undefined) return Promise.reject(new NotLedHereError(partition));
    return this.remote.append(partition, encodeCommand({ timestamp_ms: Date.now(), ...kind } as Command));
  }

  /**
   * Hands the rule book to every partition whose log has an older one (a LimitRules command
   * each); resolves once all are durable. Called when the book changes and when partitions
   * open, so a partition that missed a change (a crash between the metadata write and its
   * append) catches up.
   */
  async setLimitRules(book: RuleBook): Promise<void> {
    const limit_rules = limitRulesCommand(book);
    await Promise.all(this.processors.filter((p) => p.state.flow.rules.book.version < book.version).map((p) => p.append({ kind: 'limit_rules', limit_rules })));
  }

  /**
   * Hands the services' state TTLs to the partitions (a StateTtls command each; the same book
   * again changes nothing); resolves once all are durable. When a service changes: to every
   * partition, so that of two changes in quick succession the later lands last whatever the
   * first's append had reached. When partitions open (`onlyWhereDiffers`): where the book differs.
   */
  async setStateTtls(book: ReadonlyArray<{ service: string; ttl_ms: number; on_access: boolean }>, { onlyWhereDiffers = false } = {}): Promise<void> {
    const want = JSON.stringify(book.map((e) => [e.service, e.ttl_ms, e.on_access]));
    const differs = (p: PartitionProcessor) => !onlyWhereDiffers || JSON.stringify(p.state.ttl.entries().map((e) => [e.service, e.ttl_ms, e.on_access])) !== want;
    const state_ttls = { services: book.map((e) => ({ ...e })) };
    await Promise.all(this.processors.filter(differs).map((p) => p.append({ kind: 'state_ttls', state_ttls })));
  }

  invocation(id: InvocationId): InvocationStatus | undefined {
    return this.processorFor(id).invocation(id.text);
  }

  /**
   * Resolves once what a read of this invocation's partition saw before the call is durable:
   * await it before an answer shows a status read from memory (PartitionProcessor.durableNow).
   */
  durable(id: InvocationId): Promise<void> {
    return this.processorFor(id).durableNow();
  }

  /** Every invocation of every partition: in memory first (it is ahead of the store), then the store. */
  async *scanInvocations(): AsyncGenerator<InvocationStatus> {
    for (const p of this.views()) {
      const inMemory = new Set<string>();
      for (const s of [...p.state.invocations.values()]) {
        inMemory.add(s.id);
        yield s;
      }
      yield* invocationsTable.scanExcept(this.db!, p.partition, inMemory);
    }
  }

  /**
   * Calls `listener` with the statuses every durable batch wrote, from now on; returns the
   * function that stops it. Together with `scanInvocationLines` started after it, a copy of
   * every status can be kept without reading the store again.
   */
  watchInvocations(listener: InvocationListener): () => void {
    this.invocationListeners.add(listener);
    return () => this.invocationListeners.delete(listener);
  }

  /**
   * Calls `listener` at once with what each partition here holds of Kafka subscriptions (pending
   * counts, every position), then after each durable batch that changed it; returns the function
   * that stops it. A copy kept from these (partition threads: the main thread's) is never older
   * than the batch whose append the caller awaited, for the batch's own partition.
   */
  watchSubscriptions(listener: SubscriptionListener): () => void {
    this.subscriptionListeners.add(listener);
    for (const { partition, state } of this.views()) {
      const pending = state.subscriptionCounts();
      this.pendingTold.set(partition, pending);
      listener({ partition, pending, positions: [...state.subscriptionPositions.values()] });
    }
    return () => this.subscriptionListeners.delete(listener);
  }

  private observeSubscriptions(partition: number, writes: readonly StateWrite[]): void {
    const state = this.byPartition[partition]?.state ?? this.replicas.get(partition);
    if (state === undefined) return;
    const positions: SubscriptionPosition[] = [];
    const prefix = subscriptionPositionsTable.prefix(partition);
    for (const [key, value] of writes) if (value !== null && key.startsWith(prefix)) positions.push(subscriptionPositionsTable.decode(value));
    // Most batches: no position written and the counts as told (empty, on most servers).
    if (positions.length === 0 && state.subscriptionCountsEqual(this.pendingTold.get(partition))) return;
    const pending = state.subscriptionCounts();
    this.pendingTold.set(partition, pending);
    for (const l of this.subscriptionListeners) l({ partition, pending, positions });
  }

  /** Hands what a durable batch of `partition` wrote to the watchers (a follower's batches too); one watcher's failure does not keep the batch from the others. */
  observeBatch(partition: number, writes: readonly StateWrite[]): void {
    let failure: unknown;
    try {
      if (this.invocationListeners.size > 0) this.observeInvocations(partition, writes);
    } catch (err) {
      failure = err;
    }
    if (this.subscriptionListeners.size > 0) this.observeSubscriptions(partition, writes);
    if (failure !== undefined) throw failure; // the processor logs it (RT0006)
  }

  private observeInvocations(partition: number, writes: readonly StateWrite[]): void {
    const changes: InvocationChanges = [];
    for (const [key, value] of writes) {
      const id = invocationsTable.idOf(partition, key);
      if (id !== undefined) changes.push([id, value]);
    }
    if (changes.length === 0) return;
    for (const l of this.invocationListeners) l(changes);
  }

  /**
   * Every stored status of every partition as stored (JSON, which has no raw newline), one per
   * line, in chunks of about LINES_PER_CHUNK_BYTES; nothing is decoded. A chunk is valid until the
   * next is asked for: the same buffer is filled again (the query engine's IPC copies it as it sends).
   */
  async *scanInvocationLines(): AsyncGenerator<Buffer> {
    let chunk = Buffer.allocUnsafe(LINES_PER_CHUNK_BYTES);
    let used = 0;
    // Every partition this worker answers for, led, followed or not open yet: a partition opened or
    // followed after this scan began has its statuses written as it is folded, and those writes are watched.
    for (const partition of this.allPartitions()) {
      for await (const raw of invocationsTable.records(this.db!, partition)) {
        if (used + raw.length + 1 > chunk.length && used > 0) {
          yield chunk.subarray(0, used);
          used = 0;
        }
        if (raw.length + 1 > chunk.length) chunk = Buffer.allocUnsafe(raw.length + 1);
        used += raw.copy(chunk, used);
        chunk[used++] = 0x0a;
      }
    }
    if (used > 0) yield chunk.subarray(0, used);
  }

  /** The stored journal of an invocation (completed ones included, until their retention ends). */
  readJournal(id: InvocationId): Promise<JournalEntry[]> {
    return journalTable.read(this.db!, this.partitionIndexOf(id.partitionKey), id.text);
  }

  /** Every state entry, from the store, with when its object's state expires (a service with a state TTL). */
  async *storedState(): AsyncGenerator<[objectKey: string, stateKey: string, value: Buffer, expires_at_ms: number | undefined]> {
    for (const p of this.views()) {
      const ttls = p.state.ttl.entries().length > 0;
      for await (const [objectKey, stateKey, value] of stateTable.scan(this.db!, p.partition)) {
        yield [objectKey, stateKey, value, ttls ? p.state.ttl.expiresAt(splitObjectKey(objectKey).service, objectKey) : undefined];
      }
    }
  }

  /** Every lock held, from the store (memory holds only the most recently used keys). */
  async *storedLocks(): AsyncGenerator<[objectKey: string, holder: { id: string; acquired_at_ms?: number }]> {
    for (const p of this.views()) yield* locksTable.scan(this.db!, p.partition);
  }

  /** The flow-control queues a partition has meta for, from the store (scope, limit key). */
  async *storedQueueMetas(partition: number): AsyncGenerator<[scope: string, limitKey: string]> {
    for await (const [scope, limitKey] of vqueueMetaTable.scan(this.db!, partition)) yield [scope, limitKey];
  }

  /** Every schedule, from the store. */
  async *storedSchedules(): AsyncGenerator<ScheduleRecord> {
    for (const p of this.views()) yield* schedulesTable.scan(this.db!, p.partition);
  }

  /** Every workflow promise, from the store. */
  async *storedPromises(): AsyncGenerator<[promiseKey: string, promise: PromiseState]> {
    for (const p of this.views()) yield* promisesTable.scan(this.db!, p.partition);
  }

  /** Every invocation that has not completed: the `live` index, each status as the partition has it now. */
  async *unfinishedInvocations(): AsyncGenerator<InvocationStatus> {
    for (const p of this.views()) {
      for await (const id of liveTable.scan(this.db!, p.partition)) {
        const s = p.state.peekStatus(id);
        if (s !== undefined && s.status !== 'completed') yield s;
      }
    }
  }

  /** One stored journal entry, or undefined once it is gone (journal retention). */
  readJournalEntry(id: InvocationId, index: number): Promise<JournalEntry | undefined> {
    return journalTable.entry(this.db!, this.partitionIndexOf(id.partitionKey), id.text, index);
  }

  /**
   * Resolves with the status once the invocation has completed. `fresh`: the caller is about to
   * create it, so there is nothing to look up (which would cost a store read for a new id).
   */
  awaitCompletion(id: InvocationId, opts: { fresh?: boolean } = {}): Promise<InvocationStatus> {
    return this.waitFor(id, opts).done;
  }

  /**
   * awaitCompletion, and `stop` to drop this wait alone: for a caller whose append did not create
   * the invocation after all (refused), while another caller's wait for the same id stays.
   */
  waitFor(id: InvocationId, { fresh = false } = {}): { done: Promise<InvocationStatus>; stop: () => void } {
    // Led elsewhere: throws before a waiter is left behind here.
    const processor = this.processorFor(id);
    const now = fresh ? undefined : processor.invocation(id.text);
    if (now?.status === 'completed') return { done: this.durable(id).then(() => now), stop: () => {} };
    let waiter: Waiter | undefined;
    const done = new Promise<InvocationStatus>((resolve, reject) => {
      const list = this.waiters.get(id.text) ?? [];
      if (list.length >= MAX_WAITERS_PER_INVOCATION) return reject(keelError('KEEL0501', { partition: processor.partition, queued: list.length }));
      waiter = { resolve, reject };
      list.push(waiter);
      this.waiters.set(id.text, list);
    });
    const stop = () => {
      const list = this.waiters.get(id.text);
      const at = waiter === undefined || list === undefined ? -1 : list.indexOf(waiter);
      if (at < 0) return;
      list!.splice(at, 1);
      if (list!.length === 0) this.waiters.delete(id.text);
    };
    return { done, stop };
  }

  execute(processor: PartitionProcessor, actions: Action[]): void {
    // A partition being handed over: its next leader derives what must run from the state.
    if (processor.retired) actions = actions.filter((a) => a.kind === 'completed');
    let started: Map<string, number> | undefined;
    for (const a of actions) {
      switch (a.kind) {
        case 'start':
          (started ??= new Map()).set(a.id, a.epoch);
          this.runner?.start(processor, a.id, a.epoch);
          break;
        case 'forward':
          // An attempt this batch started is given its journal as the whole batch left it: an entry
          // the batch appended after the start is in it, and sent again it would arrive twice.
          if (started?.get(a.id) === a.epoch) break;
          this.runner?.forward(a.id, a.epoch, a.type, a.payload);
          break;
        case 'timer':
          this.timerWindows.get(processor.partition)!.add(a.timer);
          break;
        case 'retry': {
          const id = InvocationId.parse(a.id)!;
          // A partition closed meanwhile (led elsewhere now): its next leader re-arms the retry from its state.
          this.at(a.at_ms, () => (this.byPartition[processor.partition] === processor ? processor.append({ kind: 'retry_attempt', retry_attempt: { invocation_id: id.bytes, epoch: a.epoch } }) : Promise.resolve()));
          break;
        }
        case 'outbox':
          this.shuffles.get(processor.partition)!.announce(a.entry);
          break;
        case 'abort':
          this.runner?.abort(a.id);
          break;
        case 'reject':
          this.runner?.reject(processor, a);
          break;
        case 'completed': {
          const s = processor.invocation(a.id)!;
          this.observeCompletion(s);
          const list = this.waiters.get(a.id);
          if (list === undefined) break;
          this.waiters.delete(a.id);
          for (const w of list) w.resolve(s);
          break;
        }
      }
    }
  }

  /** Metrics of a completed invocation, and its span when it is traced. */
  private observeCompletion(s: InvocationStatus): void {
    const cells = this.telemetry.metrics.target(s.service, s.handler);
    const outcome = completionOutcome(s);
    const completed_at_ms = s.completed_at_ms ?? s.modified_at_ms;
    cells.completed[outcome].inc();
    cells.invocationSeconds.observe((completed_at_ms - s.created_at_ms) / 1000);
    if (this.telemetry.tracing.enabled && s.traceparent !== undefined) {
      const failure = s.result?.failure;
      this.telemetry.tracing.invocationCompleted({ ...s, completed_at_ms, outcome, ...(failure ? { failure } : {}) });
    }
  }

  /** How commands reach partitions open elsewhere: led by other nodes of a cluster, or served by another worker of this process. */
  setRemote(remote: RemotePartitions): void {
    this.remote = remote;
  }

  /**
   * Appends an outbox entry to its target partition, then tells the source it may drop it. After
   * a crash in between, the entry is sent again and the target drops the duplicate. The refusal
   * is checked before appending, so that the Shuffle stops before any later entry is taken.
   *
   * A target led by another node is sent to through `remote`, in order. A target drops what is
   * at or below the last sequence it has from the source, so entries from one source to one target
   * must arrive in order: while some are on their way by one route (here, or a node), an entry
   * that would take another (its target moved meanwhile) is refused, and the Shuffle sends it again
   * once they have settled.
   */
  private send(source: PartitionProcessor, entry: OutboxEntry): Error | Promise<void> {
    if (this.stopped) return keelError('KEEL0502', { partition: source.partition });
    const index = this.partitionIndexOf(InvocationId.parse(entry.target)!.partitionKey);
    const target = this.byPartition[index];
    const route = target !== undefined ? LOCAL_ROUTE : this.remote?.leaderOf(index);
    if (route === undefined) return new NotLedHereError(index);
    const key = source.partition * this.config.worker.partitions + index;
    const channel = this.channels.get(key) ?? { route, in_flight: 0 };
    if (channel.in_flight > 0 && channel.route !== route) return new NotLedHereError(index);
    let sent: Promise<void>;
    if (target !== undefined) {
      const appended = this.appendEncoded(target, entry.command);
      if (appended instanceof Error) return appended;
      sent = appended;
    } else {
      sent = this.remote!.append(index, entry.command);
    }
    channel.route = route;
    channel.in_flight += 1;
    this.channels.set(key, channel);
    const settled = () => {
      channel.in_flight -= 1;
      if (channel.in_flight === 0 && this.channels.get(key) === channel) this.channels.delete(key);
    };
    return sent.then(
      () => {
        settled();
        return source.append({ kind: 'outbox_delivered', outbox_delivered: { seq: entry.seq } });
      },
      (err: unknown) => {
        settled();
        throw err;
      },
    );
  }

  /**
   * Appends a command another partition encoded (an outbox entry, here or from another node) to
   * `target`, in its own time: the refusal when it will not take it now.
   */
  appendEncoded(target: PartitionProcessor, bytes: Buffer): Error | Promise<void> {
    const decoded: Command = decodeCommand(bytes);
    const { timestamp_ms: _sent_at, ...command } = decoded;
    const refusal = target.refusal(decoded.kind, true);
    if (refusal !== undefined) return refusal;
    return target.append(command as CommandKind);
  }

  /** Runs `f` at wall-clock time `at_ms` (at once if it has passed). */
  private at(at_ms: number, f: () => Promise<void>): void {
    if (this.stopped) return;
    const delay = at_ms - Date.now();
    const handle = setTimeout(
      () => {
        this.timers.delete(handle);
        if (delay > MAX_TIMEOUT_MS) return this.at(at_ms, f);
        f().catch((err) => this.logger.error({ err, code: 'RT0006' }, 'cannot append a timer command'));
      },
      Math.max(0, Math.min(delay, MAX_TIMEOUT_MS)),
    );
    this.timers.add(handle);
  }
}

function notLedHere(partition: number): never {
  throw new NotLedHereError(partition);
}

/** Each partition's share of worker.storage_db.state_cache_size (split evenly). */
export function stateCacheBytesPerPartition(config: Config): number {
  return Math.max(1, Math.floor(config.worker.storage_db.state_cache_size_bytes / config.worker.partitions));
}

function completionOutcome(s: InvocationStatus): CompletionOutcome {
  const failure = s.result?.failure;
  if (failure === undefined) return 'succeeded';
  return failure.code === KILLED_FAILURE.code && failure.message === KILLED_FAILURE.message ? 'killed' : 'failed';
}

/** The store's group commits, observed into `keel_store_write_duration_seconds`. */
export function storeWriteObserver(metrics: KeelMetrics): StoreWriteObserver {
  const cells = metrics.storeWrites();
  return (write_ms, synced) => (synced ? cells.synced : cells.unsynced).observe(write_ms / 1000);
}
