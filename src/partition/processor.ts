import type { Logger } from '../common/logger.js';
import { KeelError } from '../errors/index.js';
import { decodeCommand, encodeCommand, type Command, type CommandKind } from '../log/commands.js';
import { PartitionLog } from '../log/partition-log.js';
import type { Db } from '../storage/store.js';
import { fold } from './fold/index.js';
import {
  PartitionState,
  decodeEntry,
  parseTimerKey,
  type Action,
  type InvocationStatus,
} from './state.js';

/** Runs the actions of a durable batch: the invoker, timers, waiting clients. */
export interface Effects {
  execute(processor: PartitionProcessor, actions: Action[]): void;
}

interface Pending {
  command: Command;
  resolve: () => void;
  reject: (err: Error) => void;
}

const MAX_BATCH_COMMANDS = 1024;
const MAX_QUEUED_COMMANDS = 200_000;

/**
 * One partition: appends commands to its log, folds them into its state, and runs the actions
 * once the batch is durable. Commands that arrive while a batch is being written are committed
 * together in the next batch (group commit).
 */
export class PartitionProcessor {
  private queue: Pending[] = [];
  private writing = false;
  private closed = false;
  private idle: Promise<void> = Promise.resolve();
  private settleIdle: (() => void) | undefined;

  private constructor(
    readonly partition: number,
    private readonly log: PartitionLog,
    readonly state: PartitionState,
    private readonly fsync: boolean,
    private readonly effects: Effects,
    private readonly logger: Logger,
  ) {}

  /** Opens the partition and loads its materialised state from the store. */
  static async open(db: Db, partition: number, fsync: boolean, effects: Effects, logger: Logger): Promise<PartitionProcessor> {
    const log = await PartitionLog.open(db, partition);
    const state = await loadState(db, partition);
    return new PartitionProcessor(partition, log, state, fsync, effects, logger.child({ partition }));
  }

  /** The actions that bring a freshly opened partition back to life. */
  recoveryActions(): Action[] {
    const actions: Action[] = [];
    for (const s of this.state.invocations.values()) {
      if (s.status === 'running') actions.push({ kind: 'start', id: s.id, epoch: s.epoch });
      else if (s.status === 'backing-off') actions.push({ kind: 'retry', id: s.id, epoch: s.epoch, at_ms: s.next_retry_at_ms ?? 0 });
    }
    for (const timer of this.state.timers.values()) actions.push({ kind: 'timer', timer });
    for (const entry of [...this.state.outbox.values()].sort((a, b) => a.seq - b.seq)) actions.push({ kind: 'outbox', entry });
    return actions;
  }

  start(): void {
    this.effects.execute(this, this.recoveryActions());
  }

  /** Appends a command; resolves once it is durable and folded (its actions may still run). */
  append(kind: CommandKind): Promise<void> {
    if (this.closed) return Promise.reject(new KeelError(undefined, `partition ${this.partition} is closed`, 503));
    if (this.queue.length >= MAX_QUEUED_COMMANDS) {
      return Promise.reject(new KeelError(undefined, `partition ${this.partition} is overloaded`, 503));
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ command: { timestamp_ms: Date.now(), ...kind } as Command, resolve, reject });
      if (!this.writing) this.scheduleFlush();
    });
  }

  invocation(id: string): InvocationStatus | undefined {
    return this.state.status(id);
  }

  /** What the admin UI shows of this partition: whether it takes commands, how far it is, how busy. */
  health(): { applied_position: number; queued_commands: number; max_queued_commands: number; writing: boolean; closed: boolean } {
    return {
      applied_position: this.log.applied_position,
      queued_commands: this.queue.length,
      max_queued_commands: MAX_QUEUED_COMMANDS,
      writing: this.writing,
      closed: this.closed,
    };
  }

  /** Waits for the batch in flight and every queued command, then refuses new ones. */
  async close(): Promise<void> {
    while (this.writing || this.queue.length > 0) await this.idle;
    this.closed = true;
  }

  private scheduleFlush(): void {
    this.writing = true;
    this.idle = new Promise((resolve) => (this.settleIdle = resolve));
    setImmediate(() => void this.flush());
  }

  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, MAX_BATCH_COMMANDS);
      const records: Buffer[] = [];
      const actions: Action[] = [];
      for (const p of batch) {
        records.push(encodeCommand(p.command));
        try {
          fold({ state: this.state, actions, now_ms: p.command.timestamp_ms }, p.command);
        } catch (err) {
          // A fold that throws is a bug; the rebuild would throw at the same command, so state stays comparable.
          this.logger.error({ err }, 'fold failed');
        }
      }
      try {
        await this.log.append(records, this.state.takeWrites(), this.fsync);
      } catch (err) {
        // Memory is ahead of the store now: the only safe way on is a restart from the store.
        this.logger.fatal({ err, code: 'RT0006' }, 'cannot write the partition log; stopping');
        for (const p of batch) p.reject(err as Error);
        process.exitCode = 1;
        setImmediate(() => process.exit(1));
        return;
      }
      for (const p of batch) p.resolve();
      try {
        this.effects.execute(this, actions);
      } catch (err) {
        this.logger.error({ err }, 'running the actions of a batch failed');
      }
    }
    this.writing = false;
    this.settleIdle?.();
  }
}

async function loadState(db: Db, partition: number): Promise<PartitionState> {
  const state = new PartitionState(partition);
  state.loader = (key) => db.getSync(key);
  const prefix = state.prefix;
  // Completed invocations stay in the store; the fold reads them back when it needs one.
  for await (const [, value] of db.iterator({ gte: `${prefix}inv/`, lt: `${prefix}inv/~` })) {
    const s = JSON.parse(value.toString('utf8')) as InvocationStatus;
    if (s.status !== 'completed') state.invocations.set(s.id, s);
  }
  for (const s of state.invocations.values()) {
    const journal = [];
    for await (const [, value] of db.iterator({ gte: `${prefix}j/${s.id}/`, lt: `${prefix}j/${s.id}/~` })) journal.push(decodeEntry(value));
    if (journal.length !== s.journal_length) {
      throw new KeelError('RT0006', `partition ${partition}: journal of ${s.id} has ${journal.length} entries, its status says ${s.journal_length}`);
    }
    state.journals.set(s.id, journal);
  }
  for await (const key of db.keys({ gte: `${prefix}timer/`, lt: `${prefix}timer/~` })) {
    state.timers.set(key, parseTimerKey(key, prefix));
  }
  const scan = (table: string) => db.iterator({ gte: `${prefix}${table}/`, lt: `${prefix}${table}/~` });
  const rest = (key: string, table: string) => key.slice(`${prefix}${table}/`.length);
  for await (const [key, value] of scan('lock')) state.locks.set(rest(key, 'lock'), value.toString('utf8'));
  for await (const [key, value] of scan('inbox')) {
    const r = rest(key, 'inbox');
    const cut = r.lastIndexOf('/');
    const objectKey = r.slice(0, cut);
    const q = state.inboxes.get(objectKey) ?? [];
    q.push({ id: value.toString('utf8'), seq: Number(r.slice(cut + 1)) });
    state.inboxes.set(objectKey, q);
  }
  for (const q of state.inboxes.values()) q.sort((a, b) => a.seq - b.seq);
  for await (const [key, value] of scan('state')) {
    const r = rest(key, 'state');
    const cut = r.lastIndexOf('/');
    const m = state.objectState.get(r.slice(0, cut)) ?? new Map<string, Buffer>();
    m.set(r.slice(cut + 1), value);
    state.objectState.set(r.slice(0, cut), m);
  }
  for await (const [key, value] of scan('promise')) state.promises.set(rest(key, 'promise'), JSON.parse(value.toString('utf8')));
  for await (const [key, value] of scan('outbox')) {
    const e = JSON.parse(value.toString('utf8'));
    const seq = Number(rest(key, 'outbox'));
    state.outbox.set(seq, { seq, target: e.target, command: Buffer.from(e.command, 'base64') });
  }
  for await (const [key, value] of scan('dedup')) state.dedup.set(Number(rest(key, 'dedup')), Number(value.toString('utf8')));
  const counters = await db.get(`${prefix}counters`);
  if (counters !== undefined) state.counters = JSON.parse(counters.toString('utf8'));
  state.takeWrites();
  return state;
}

/**
 * Folds a partition's whole log into fresh state and compares every state key with the
 * store. Returns the keys that differ (empty when the materialised state is exactly the fold).
 */
export async function verifyPartition(db: Db, partition: number): Promise<string[]> {
  const log = await PartitionLog.open(db, partition);
  const fresh = new PartitionState(partition);
  const rebuilt = new Map<string, Buffer>();
  fresh.loader = (key) => rebuilt.get(key);
  for await (const [, record] of log.read(1)) {
    const cmd = decodeCommand(record);
    try {
      fold({ state: fresh, actions: [], now_ms: cmd.timestamp_ms }, cmd);
    } catch {
      // Same as the processor: a throwing fold keeps the writes it made.
    }
    for (const [key, value] of fresh.takeWrites()) {
      if (value === null) rebuilt.delete(key);
      else rebuilt.set(key, value);
    }
  }
  const differing: string[] = [];
  const prefix = fresh.prefix;
  const seen = new Set<string>();
  for await (const [key, value] of db.iterator({ gte: prefix, lt: `${prefix}~` })) {
    seen.add(key);
    const expected = rebuilt.get(key);
    if (expected === undefined || !expected.equals(value)) differing.push(key);
  }
  for (const key of rebuilt.keys()) if (!seen.has(key)) differing.push(key);
  return differing;
}
