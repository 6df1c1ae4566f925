import type { Config } from '../config/index.js';
import { InvocationId } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import type { Invoker } from '../invoker/index.js';
import { decodeCommand, type CommandKind } from '../log/commands.js';
import { GroupWriter } from '../storage/group-writer.js';
import type { Db } from '../storage/store.js';
import { PartitionProcessor, type Effects } from './processor.js';
import type { Action, InvocationStatus, OutboxEntry, Timer } from './state.js';

/** setTimeout takes at most a signed 32-bit delay; longer timers are re-armed in steps. */
const MAX_TIMEOUT_MS = 2_147_483_647;
const MAX_WAITERS_PER_INVOCATION = 10_000;

/**
 * The worker: every partition processor of this node, the in-memory timers that drive them,
 * and the clients waiting for results. It routes an invocation to the partition that owns
 * its partition key.
 */
export class Worker implements Effects {
  readonly processors: PartitionProcessor[] = [];
  private invoker: Invoker | undefined;
  private readonly waiters = new Map<string, Array<(s: InvocationStatus) => void>>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private stopped = false;
  private cleaner: NodeJS.Timeout | undefined;
  private cleaning = false;
  private db: Db | undefined;

  constructor(
    private readonly config: Config,
    private readonly logger: Logger,
  ) {}

  async open(db: Db): Promise<void> {
    this.db = db;
    const writer = new GroupWriter(db);
    for (let p = 0; p < this.config.worker.partitions; p++) {
      this.processors.push(await PartitionProcessor.open(db, writer, p, this.config.worker.storage_db.fsync, this, this.logger));
    }
  }

  /** Starts the invoker on the recovered state: running attempts restart, timers re-arm. */
  start(invoker: Invoker): void {
    this.invoker = invoker;
    for (const p of this.processors) p.start();
    this.cleaner = setInterval(() => {
      if (this.cleaning) return;
      this.cleaning = true;
      this.clean(Date.now())
        .catch((err) => this.logger.error({ err }, 'retention cleanup failed'))
        .finally(() => (this.cleaning = false));
    }, this.config.worker.cleanup_interval_ms);
    this.cleaner.unref();
  }

  /**
   * Retention: completed invocations whose retention is over are purged (status and journal),
   * or lose only their journal when the journal retention is shorter. Nothing else is deleted.
   * Completed invocations live in the store, so the scan reads it.
   */
  async clean(now_ms: number): Promise<number> {
    let purged = 0;
    for (const p of this.processors) {
      const prefix = `${p.state.prefix}inv/`;
      for await (const value of this.db!.values({ gte: prefix, lt: `${prefix}~` })) {
        if (this.stopped) return purged;
        const s = JSON.parse(value.toString('utf8')) as InvocationStatus;
        if (s.status !== 'completed' || s.completed_at_ms === undefined) continue;
        const id = InvocationId.parse(s.id)!;
        if (now_ms >= s.completed_at_ms + s.completion_retention_ms) {
          void p.append({ purge: { invocation_id: id.bytes } }).catch(() => {});
          purged++;
        } else if (s.journal_length > 0 && now_ms >= s.completed_at_ms + s.journal_retention_ms) {
          void p.append({ purge: { invocation_id: id.bytes, journal_only: true } }).catch(() => {});
          purged++;
        }
      }
    }
    return purged;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.cleaner);
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.invoker?.stop();
    await Promise.all(this.processors.map((p) => p.close()));
  }

  partitionOf(partitionKey: bigint): PartitionProcessor {
    const n = BigInt(this.processors.length);
    return this.processors[Number((partitionKey * n) >> 64n)]!;
  }

  processorFor(id: InvocationId): PartitionProcessor {
    return this.partitionOf(id.partitionKey);
  }

  append(id: InvocationId, kind: CommandKind): Promise<void> {
    return this.processorFor(id).append(kind);
  }

  invocation(id: InvocationId): InvocationStatus | undefined {
    return this.processorFor(id).invocation(id.text);
  }

  /**
   * Resolves with the status once the invocation has completed. `fresh`: the caller is about to
   * create it, so there is nothing to look up (which would cost a store read for a new id).
   */
  awaitCompletion(id: InvocationId, { fresh = false } = {}): Promise<InvocationStatus> {
    const now = fresh ? undefined : this.invocation(id);
    if (now?.status === 'completed') return Promise.resolve(now);
    return new Promise((resolve, reject) => {
      let list = this.waiters.get(id.text);
      if (list === undefined) {
        list = [];
        this.waiters.set(id.text, list);
      }
      if (list.length >= MAX_WAITERS_PER_INVOCATION) {
        reject(new Error('too many clients waiting for this invocation'));
        return;
      }
      list.push(resolve);
    });
  }

  execute(processor: PartitionProcessor, actions: Action[]): void {
    for (const a of actions) {
      switch (a.kind) {
        case 'start':
          this.invoker?.start(processor, a.id, a.epoch);
          break;
        case 'forward':
          this.invoker?.forward(a.id, a.epoch, a.type, a.payload);
          break;
        case 'timer':
          this.armTimer(processor, a.timer);
          break;
        case 'retry': {
          const id = InvocationId.parse(a.id)!;
          this.at(a.at_ms, () => processor.append({ retry_attempt: { invocation_id: id.bytes, epoch: a.epoch } }));
          break;
        }
        case 'outbox':
          this.deliver(processor, a.entry);
          break;
        case 'abort':
          this.invoker?.abort(a.id);
          break;
        case 'reject':
          this.invoker?.reject(processor, a);
          break;
        case 'completed': {
          const list = this.waiters.get(a.id);
          if (list === undefined) break;
          this.waiters.delete(a.id);
          const s = processor.invocation(a.id)!;
          for (const resolve of list) resolve(s);
          break;
        }
      }
    }
  }

  private armTimer(processor: PartitionProcessor, t: Timer): void {
    const id = InvocationId.parse(t.id)!;
    this.at(t.wake_up_ms, () =>
      processor.append({ timer_fired: { invocation_id: id.bytes, completion_id: t.completion_id, wake_up_ms: t.wake_up_ms, kind: t.kind } }),
    );
  }

  /**
   * Appends an outbox entry to its target partition, then tells the source it may drop it.
   * After a crash in between, the entry is sent again and the target drops the duplicate.
   */
  private deliver(source: PartitionProcessor, entry: OutboxEntry): void {
    if (this.stopped) return;
    const target = this.processorFor(InvocationId.parse(entry.target)!);
    const { timestamp_ms: _sent_at, ...command } = decodeCommand(entry.command);
    target
      .append(command as CommandKind)
      .then(() => source.append({ outbox_delivered: { seq: entry.seq } }))
      .catch((err) => this.logger.error({ err, seq: entry.seq }, 'outbox delivery failed; it is retried on restart'));
  }

  /** Runs `f` at wall-clock time `at_ms` (at once if it has passed). */
  private at(at_ms: number, f: () => Promise<void>): void {
    if (this.stopped) return;
    const delay = at_ms - Date.now();
    const handle = setTimeout(
      () => {
        this.timers.delete(handle);
        if (delay > MAX_TIMEOUT_MS) return this.at(at_ms, f);
        f().catch((err) => this.logger.error({ err }, 'cannot append a timer command'));
      },
      Math.max(0, Math.min(delay, MAX_TIMEOUT_MS)),
    );
    this.timers.add(handle);
  }
}
