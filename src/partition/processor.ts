import Queue from 'yocto-queue';
import { assert, InvariantError } from '../common/assert.js';
import { partitionKeyOfIdBytes } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import { keelError } from '../errors/index.js';
import { encodeCommand, type Command, type CommandKind } from '../log/commands.js';
import { MessageType } from '../protocol/messages.js';
import { foldRead } from './catch-up.js';
import { EmbeddedLog, type PartitionLog } from '../log/partition-log.js';
import type { GroupWriter } from '../storage/group-writer.js';
import { KeelMetrics, type PartitionCells } from '../telemetry/metrics.js';
import type { Db, StateWrite } from '../storage/store.js';
import { fold } from './fold/index.js';
import { loadState, recoveryActions } from './recovery.js';
import type { Action, InvocationStatus, JournalEntry, PartitionState } from './state.js';
import { objectKeyOf } from './state.js';

/** Runs the actions of a durable batch: the invoker, timers, waiting clients. */
export interface Effects {
  execute(processor: PartitionProcessor, actions: Action[]): void;
  /** The partition stopped (a broken invariant, a failed write): health reports it from now on. */
  halted?(failure: PartitionFailure): void;
}

/** What an attempt of an invocation needs of its partition: reads, and appends of its messages. */
export interface AttemptHost {
  readonly partition: number;
  /** The partition is closing or closed here (another node leads it now): no attempt starts on it. */
  readonly retired: boolean;
  invocation(id: string): InvocationStatus | undefined;
  journal(id: string): readonly JournalEntry[];
  objectState(service: string, key: string, scope?: string): ReadonlyMap<string, Buffer>;
  append(kind: CommandKind, options?: AppendOptions): Promise<void>;
}

export interface AppendOptions {
  /**
   * Whether the caller makes something visible outside the process once the append resolves (an
   * answer to a client, a Kafka offset), so it must be on disk first. Default true. An attempt's
   * own messages pass false: what they make visible (a completion sent to the endpoint, a reply)
   * leaves as an action of their batch, and `flush` syncs a batch with such actions anyway (a
   * batch of them with no action may wait, folded, up to CARRY_MS for the next to share its write).
   */
  durable?: boolean;
}

/** Why a partition stopped, for logs and `/health`. */
export interface PartitionFailure {
  partition: number;
  reason: string;
  at_ms: number;
}

interface Pending {
  command: Command;
  durable: boolean;
  resolve: () => void;
  reject: (err: Error) => void;
}

/** Folded commands on their way to one store write: what it records, who waits, what runs after. */
interface Step {
  pending: Pending[];
  records: Buffer[];
  actions: Action[];
  bytes: number;
  entriesBefore: number;
}

const MAX_BATCH_COMMANDS = 1024;
/**
 * A batch that needs no fsync waits this long, folded, for the next batch to share its store
 * write: an attempt's command (a `ctx.run`'s RunCommand) is followed within microseconds by what
 * needs the fsync (its result), and a store write costs ~70 µs of CPU whatever it holds.
 */
const CARRY_MS = 2;
/**
 * Invocations of one partition that have not completed. Past it, new invocations are refused
 * with 503 (KEEL0501) until some complete: each costs memory (its status and journal) and a
 * place in the invoker's queue. Calls from handlers are refused the same way and their outbox
 * delivery retries with backoff, so nothing accepted is lost.
 */
export const MAX_LIVE_INVOCATIONS_PER_PARTITION = 250_000;
/** Commands waiting for their batch; past it appends are refused with 503 (back-pressure). */
const MAX_QUEUED_COMMANDS = 200_000;

/**
 * One partition: appends commands to its log, folds them into its state, and runs the actions
 * once the batch is durable. Commands that arrive while a batch is being written are committed
 * together in the next batch (group commit). A fold that throws or a write that fails stops
 * the partition: its memory can no longer be trusted, the batch is not written, and every
 * append is refused until a restart rebuilds the state from the store.
 */
export class PartitionProcessor implements AttemptHost {
  // Linked queues: taking a batch off the front is O(batch), not O(queue) as an array's splice(0, n).
  private readonly queue = new Queue<Pending>();
  private writing = false;
  private closed = false;
  private retiring = false;
  private failure: PartitionFailure | undefined;
  private idle: Promise<void> = Promise.resolve();
  private settleIdle: (() => void) | undefined;
  /** Batches folded so far, numbered from 1, and the last of them known to be durable. */
  private folded_batches = 0;
  private durable_batches = 0;
  /**
   * Reads waiting for a batch to be durable (durableNow), in the order of their batch numbers
   * (each waits for the newest batch folded when it came), and the newest waited for.
   */
  private newestWaited = 0;
  private readonly durableWaiters = new Queue<{ batch: number; resolve: () => void; reject: (err: Error) => void }>();
  /** A read waits for a batch written without fsync: the next write syncs, even one with no command. */
  private syncWanted = false;
  /** Folded, not yet written: a batch that needs no fsync, waiting up to CARRY_MS for the next (`flush`). */
  private carried: Step | undefined;
  private carryTimer: NodeJS.Timeout | undefined;
  /** CARRY_MS passed (or the partition closes): the carried batch is written as it is. */
  private carryDue = false;

  private constructor(
    readonly partition: number,
    private readonly log: PartitionLog,
    readonly state: PartitionState,
    private readonly fsync: boolean,
    private readonly effects: Effects,
    private readonly owns: (partitionKey: bigint) => boolean,
    private readonly max_live_invocations: number,
    private readonly logger: Logger,
    private readonly metrics: PartitionCells,
    private readonly observe: ((partition: number, writes: readonly StateWrite[]) => void) | undefined,
  ) {}

  /** Opens the partition and loads its materialised state from the store. */
  static async open(
    db: Db,
    writer: GroupWriter,
    partition: number,
    options: {
      fsync: boolean;
      effects: Effects;
      owns?: (partitionKey: bigint) => boolean;
      max_live_invocations?: number;
      /** Bytes of object state this partition keeps in memory (PartitionState's default when unset). */
      state_cache_bytes?: number;
      /** 0 (the default here): every record is kept. */
      log_retained_records?: number;
      logger: Logger;
      metrics?: KeelMetrics;
      /** Sees the store writes of every batch once it is durable (the query engine's copy follows them). */
      observe?: (partition: number, writes: readonly StateWrite[]) => void;
      /** Where the partition's log lives (the embedded log in `db` when unset). */
      openLog?: (partition: number) => Promise<PartitionLog>;
    },
  ): Promise<PartitionProcessor> {
    const log = await (options.openLog?.(partition) ?? EmbeddedLog.open(db, partition, writer, options.log_retained_records ?? 0));
    const state = await loadState(db, partition, options.state_cache_bytes);
    // Actions are not run: `start` derives what must run from the state, as after any restart.
    await foldRead(log, log.lead(), state, options.observe);
    const maxLive = options.max_live_invocations ?? MAX_LIVE_INVOCATIONS_PER_PARTITION;
    const metrics = (options.metrics ?? new KeelMetrics()).partition(partition);
    return new PartitionProcessor(partition, log, state, options.fsync, options.effects, options.owns ?? (() => true), maxLive, options.logger.child({ partition }), metrics, options.observe);
  }

  /** Brings a freshly opened partition back to life: attempts restart, timers re-arm. */
  start(): void {
    this.effects.execute(this, recoveryActions(this.state));
  }

  /**
   * Appends a command; resolves once it is folded and written: fsynced (with fsync on) when
   * `durable` or when its batch has actions that leave the process. Its actions may still run.
   */
  append(kind: CommandKind, options: AppendOptions = {}): Promise<void> {
    const refusal = this.refusal(kind.kind, (kind as Command).source_partition !== undefined);
    if (refusal !== undefined) return Promise.reject(refusal);
    const command = { timestamp_ms: Date.now(), ...kind } as Command;
    this.checkOwnership(command);
    return new Promise((resolve, reject) => {
      this.queue.enqueue({ command, durable: options.durable ?? true, resolve, reject });
      if (!this.writing) this.scheduleFlush();
    });
  }

  /**
   * Why `append` would refuse a command of this kind now (stopped, closed, overloaded), or
   * undefined. New work (ingress invokes, Kafka records) waits while the partition holds its
   * bound of live invocations; what comes from another partition's outbox does not: the outbox
   * delivers in sequence order, so a refused invoke would hold back the call results behind it,
   * which the live invocations here may be waiting for (a deadlock at the bound).
   */
  refusal(kind: CommandKind['kind'], fromOutbox = false): Error | undefined {
    if (this.failure !== undefined) return keelError('KEEL0503', { partition: this.partition, reason: this.failure.reason });
    if (this.closed) return keelError('KEEL0502', { partition: this.partition });
    if (this.queue.size >= MAX_QUEUED_COMMANDS) return keelError('KEEL0501', { partition: this.partition, queued: this.queue.size });
    if (!fromOutbox && (kind === 'invoke' || kind === 'subscription_records') && this.state.liveInvocations() >= this.max_live_invocations) {
      return keelError('KEEL0501', { partition: this.partition, queued: this.state.liveInvocations() });
    }
    return undefined;
  }

  get health(): PartitionFailure | undefined {
    return this.failure;
  }

  /** How the partition is doing, for `GET /partitions`: whether it takes commands, how far it is, how busy. */
  info(): { applied_position: number; queued_commands: number; max_queued_commands: number; writing: boolean; closed: boolean; failure?: string } {
    return {
      applied_position: this.log.applied_position,
      queued_commands: this.queue.size,
      max_queued_commands: MAX_QUEUED_COMMANDS,
      writing: this.writing,
      closed: this.closed || this.failure !== undefined,
      ...(this.failure ? { failure: this.failure.reason } : {}),
    };
  }

  invocation(id: string): InvocationStatus | undefined {
    return this.state.status(id);
  }

  /**
   * Resolves once every batch folded so far is durable: what a read of the state saw before the
   * call may then be shown outside (an answer to a client). The state runs ahead of the store
   * while a batch is being written, and a batch nothing outside had seen was written without
   * fsync; such a read must not answer before it is on disk, or a crash takes back what a client
   * was told.
   */
  durableNow(): Promise<void> {
    if (this.failure !== undefined) return Promise.reject(keelError('KEEL0503', { partition: this.partition, reason: this.failure.reason }));
    const batch = this.folded_batches;
    if (this.durable_batches >= batch) return Promise.resolve();
    if (this.closed) return Promise.reject(keelError('KEEL0502', { partition: this.partition }));
    return new Promise((resolve, reject) => {
      assert(batch >= this.newestWaited, () => `partition ${this.partition}: a read waits for batch ${batch}, after one waiting for ${this.newestWaited}`);
      this.newestWaited = batch;
      this.durableWaiters.enqueue({ batch, resolve, reject });
      this.syncWanted = true;
      if (!this.writing) this.scheduleFlush();
    });
  }

  journal(id: string): readonly JournalEntry[] {
    return this.state.journal(id);
  }

  objectState(service: string, key: string, scope?: string): ReadonlyMap<string, Buffer> {
    return this.state.stateOf(objectKeyOf(service, key, scope));
  }

  get applied_position(): number {
    return this.log.applied_position;
  }

  /** From now on no attempt starts here and no action but a completion runs (the partition is being handed over). */
  retire(): void {
    this.retiring = true;
  }

  /** No attempt starts here: handed over, closed, or stopped (its memory may hold a batch never written). */
  get retired(): boolean {
    return this.retiring || this.closed || this.failure !== undefined;
  }

  /** Waits for the batch in flight, a carried one and every queued command, then refuses new ones. */
  async close(): Promise<void> {
    for (;;) {
      if (this.carried !== undefined && !this.writing) this.writeCarried();
      if (!this.writing && this.queue.size === 0 && this.carried === undefined) break;
      await this.idle;
    }
    this.closed = true;
  }

  /** Commands name invocations by id; each id belongs to exactly one partition. */
  private checkOwnership(command: Command): void {
    const body = (command as unknown as Record<string, { invocation_id?: Buffer } | undefined>)[command.kind];
    const bytes = body?.invocation_id;
    if (bytes === undefined) return;
    const key = partitionKeyOfIdBytes(bytes);
    assert(key === undefined || this.owns(key), () => `partition ${this.partition} got a ${command.kind} for partition key ${key}, which another partition owns`);
  }

  private scheduleFlush(): void {
    this.writing = true;
    this.idle = new Promise((resolve) => (this.settleIdle = resolve));
    setImmediate(() => void this.flush());
  }

  /**
   * Whether a batch that needs no fsync may wait for the next: not one with actions (an outbox
   * entry would start its callee CARRY_MS late when nothing follows it), not one that changes an
   * object's state (an attempt launched meanwhile reads eager state from memory, and a carried
   * batch is lost with the process), and never with a log durable on append (Kafka: no write to share).
   */
  private mayCarry(step: Step): boolean {
    if (!this.fsync || this.log.durable_on_append || this.carryDue || this.closed) return false;
    return step.actions.length === 0 && step.pending.length < MAX_BATCH_COMMANDS && !step.pending.some(writesObjectState);
  }

  private carry(step: Step): void {
    this.carried = step;
    this.carryTimer ??= setTimeout(() => this.writeCarried(), CARRY_MS);
  }

  private writeCarried(): void {
    clearTimeout(this.carryTimer);
    this.carryTimer = undefined;
    if (this.carried === undefined) return;
    this.carryDue = true;
    if (!this.writing) this.scheduleFlush();
  }

  /** Takes the queue's next commands (after a carried batch's) and folds them; false when a fold threw (the partition stopped). */
  private foldNext(step: Step): boolean {
    const batch: Pending[] = [];
    while (step.pending.length + batch.length < MAX_BATCH_COMMANDS && this.queue.size > 0) batch.push(this.queue.dequeue()!);
    step.pending.push(...batch);
    try {
      for (const p of batch) {
        const record = encodeCommand(p.command);
        step.bytes += record.length;
        step.records.push(record);
        fold({ state: this.state, actions: step.actions, now_ms: p.command.timestamp_ms ?? 0 }, p.command);
      }
    } catch (err) {
      this.halt(err, 'a command could not be folded', step.pending);
      return false;
    }
    return true;
  }

  private async flush(): Promise<void> {
    while ((this.queue.size > 0 || this.syncWanted || this.carryDue) && this.failure === undefined) {
      const step: Step = this.carried ?? { pending: [], records: [], actions: [], bytes: 0, entriesBefore: this.state.entries_appended };
      this.carried = undefined;
      if (!this.foldNext(step)) break;
      const { pending: batch, records, actions, bytes, entriesBefore } = step;
      const number = ++this.folded_batches;
      // With fsync off, written is as durable as it gets (a crash of the process loses nothing).
      const sync = this.fsync && (needsSync(batch, actions) || this.syncWanted);
      if (!sync && records.length > 0 && this.mayCarry(step)) {
        this.carry(step);
        continue;
      }
      clearTimeout(this.carryTimer);
      this.carryTimer = undefined;
      this.carryDue = false;
      const before = this.log.applied_position;
      const writes = this.state.takeWrites();
      const writeStart = performance.now();
      this.syncWanted = false;
      try {
        const last = await this.log.append(records, writes, sync);
        assert(last === before + records.length, () => `partition ${this.partition}: log at ${last} after appending ${records.length} records at ${before}`);
      } catch (err) {
        this.halt(err, 'the partition log could not be written', batch);
        break;
      }
      this.state.writesDurable();
      // A synced write puts every earlier one on disk with it.
      if (sync || !this.fsync || this.log.durable_on_append) this.settleDurable(number);
      // (a batch of no command: only a sync that reads waited for, not one for the batch metrics)
      if (batch.length > 0) this.observeBatch(records.length, bytes, performance.now() - writeStart, this.state.entries_appended - entriesBefore);
      try {
        this.observe?.(this.partition, writes);
      } catch (err) {
        this.logger.error({ err, code: 'RT0006' }, 'an observer of durable batches failed');
      }
      for (const p of batch) p.resolve();
      try {
        this.effects.execute(this, actions);
      } catch (err) {
        // The batch is durable; effects are re-derived from the state at the next restart.
        this.logger.error({ err, code: 'RT0006' }, 'running the actions of a batch failed');
      }
    }
    this.writing = false;
    this.settleIdle?.();
  }

  /** One written batch: its size, its write time, the journal entries it appended. */
  private observeBatch(commands: number, bytes: number, write_ms: number, entries: number): void {
    this.metrics.batchCommands.observe(commands);
    this.metrics.batchBytes.observe(bytes);
    this.metrics.writeSeconds.observe(write_ms / 1000);
    this.metrics.journalEntries.inc(entries);
  }

  /** Stops the partition: nothing of the failed batch is written, every waiting append fails. */
  private settleDurable(batch: number): void {
    assert(batch >= this.durable_batches && batch <= this.folded_batches, () => `partition ${this.partition}: batch ${batch} durable after ${this.durable_batches}, with ${this.folded_batches} folded`);
    this.durable_batches = batch;
    while ((this.durableWaiters.peek()?.batch ?? Infinity) <= batch) this.durableWaiters.dequeue()!.resolve();
  }

  private halt(err: unknown, what: string, batch: Pending[]): void {
    const reason = `${what}: ${(err as Error)?.message ?? String(err)}`;
    this.failure = { partition: this.partition, reason, at_ms: Date.now() };
    this.state.discardWrites();
    const refusal = keelError('KEEL0503', { partition: this.partition, reason });
    this.logger.fatal({ err, code: 'KEEL0503', invariant: err instanceof InvariantError }, `partition ${this.partition} stopped: ${reason}`);
    for (const p of batch) p.reject(refusal); // a carried batch's commands among them (`flush` takes it first)
    for (const p of this.queue.drain()) p.reject(refusal);
    clearTimeout(this.carryTimer);
    this.carryTimer = undefined;
    this.carried = undefined;
    this.carryDue = false;
    for (const w of this.durableWaiters.drain()) w.reject(refusal);
    this.effects.halted?.(this.failure);
  }
}

/**
 * Whether a batch must be on disk before its appends resolve and its actions run: when a caller
 * waits to make it visible, or when an action leaves the process (an attempt starts or is
 * aborted, a message goes to an endpoint, a client gets its answer, a retry is scheduled). A
 * timer or an outbox entry only leads to another append, whose own batch is synced if it must
 * be. An unsynced batch is written to the store's one write-ahead log (it survives a crash of the
 * process), or, when it has no actions, may first be held folded in memory for up to CARRY_MS to
 * share the next batch's write (a crash of the process then loses it); the next synced write puts
 * it on disk together with its own, in order: a crash can lose only a tail of batches nothing
 * outside has seen.
 */
function needsSync(batch: readonly Pending[], actions: readonly Action[]): boolean {
  return batch.some((p) => p.durable) || actions.some((a) => a.kind !== 'timer' && a.kind !== 'outbox');
}

const OBJECT_STATE_ENTRIES: ReadonlySet<number> = new Set([MessageType.SetStateCommand, MessageType.ClearStateCommand, MessageType.ClearAllStateCommand]);
const writesObjectState = (p: Pending): boolean => p.command.kind === 'journal_append' && OBJECT_STATE_ENTRIES.has(p.command.journal_append.entry_type ?? 0);
