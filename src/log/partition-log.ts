import { assert } from '../common/assert.js';
import type { GroupWriter } from '../storage/group-writer.js';
import type { Db, StateWrite } from '../storage/store.js';
import { logTable } from '../storage/tables/log.js';

/**
 * The append-only log of one partition. Records are numbered from 1; `applied_position` is the
 * last position whose state is stored. This is the seam for a distributed log: nothing outside
 * `log` knows where the records live.
 */
export interface PartitionLog {
  readonly partition: number;
  readonly applied_position: number;
  /** Whether an append is durable when it resolves, whatever `sync` said (a replicated log). */
  readonly durable_on_append: boolean;
  /**
   * Makes this node the partition's writer. Yields the records after `applied_position` that
   * others wrote (none in a log only this node writes); the caller folds them and passes the last
   * position folded, with the state's writes, to `advance`. Appends may follow once it ends.
   */
  lead(): AsyncIterable<[position: number, record: Buffer]>;
  advance(position: number, writes: StateWrite[]): Promise<void>;
  /**
   * Appends `records` and applies `writes` in one atomic batch; `sync` makes it durable against
   * a machine crash (fsync), otherwise against a process crash. Resolves to the last position.
   */
  append(records: Buffer[], writes: StateWrite[], sync: boolean): Promise<number>;
  /** Records from `from` (inclusive) on, in order; those trimmed away are not there. */
  read(from?: number): AsyncIterable<[position: number, record: Buffer]>;
  /** The first position still held (1 until the log is trimmed). */
  first_position(): Promise<number>;
}

/** Records below the retention window deleted together (see `EmbeddedLog.open`). */
const TRIM_CHUNK_RECORDS = 4_096;

/** The log in the embedded store, written through the store's group commit. */
export class EmbeddedLog implements PartitionLog {
  readonly durable_on_append = false;
  private next_position: number;
  /** Records at or below this position are deleted, or being deleted (0: unknown, the next trim starts at the first record). */
  private trimmed_through: number;
  private trimming = false;
  private readonly trim_chunk: number;
  /** The last position whose write has completed (trims never reach a batch still being written). */
  private written: number;

  private constructor(
    private readonly db: Db,
    private readonly writer: GroupWriter | undefined,
    readonly partition: number,
    applied: number,
    private readonly retained_records: number,
    trimmed: number,
  ) {
    this.next_position = applied + 1;
    this.written = applied;
    this.trimmed_through = trimmed;
    this.trim_chunk = Math.max(1, Math.min(TRIM_CHUNK_RECORDS, Math.floor(retained_records / 4)));
  }

  /**
   * Opens the log; without a writer it can only be read. With `retained_records` > 0 the records
   * that fall out of the newest `retained_records` are deleted in the background, a chunk at a
   * time (one range delete in the store's threads, instead of one delete per record in every
   * append's batch): the log holds the newest `retained_records`, and fewer than a chunk
   * (TRIM_CHUNK_RECORDS, or a quarter of a smaller window) of older ones.
   */
  static async open(db: Db, partition: number, writer?: GroupWriter, retained_records = 0): Promise<EmbeddedLog> {
    const applied = await logTable.readApplied(db, partition);
    if (!Number.isSafeInteger(applied) || applied < 0) throw new Error(`partition ${partition}: corrupt applied position`);
    assert(Number.isSafeInteger(retained_records) && retained_records >= 0, () => `retained_records ${retained_records}`);
    const trimmed = await logTable.readTrimmed(db, partition);
    if (!Number.isSafeInteger(trimmed) || trimmed < 0 || trimmed > applied) throw new Error(`partition ${partition}: corrupt trimmed position ${trimmed}`);
    const log = new EmbeddedLog(db, writer, partition, applied, retained_records, trimmed);
    // Records older than the window (a store from before trimming, a smaller window now, a crash
    // before a trim finished) go at once, in the background: nothing reads them.
    if (writer !== undefined) log.trim();
    return log;
  }

  get applied_position(): number {
    return this.next_position - 1;
  }

  // Only this node writes the embedded log: nothing to catch up with.
  async *lead(): AsyncGenerator<[position: number, record: Buffer]> {}

  advance(position: number): Promise<void> {
    throw new Error(`partition ${this.partition}: advance(${position}) on the embedded log, which lead() never reads`);
  }

  async append(records: Buffer[], writes: StateWrite[], sync: boolean): Promise<number> {
    if (this.writer === undefined) throw new Error(`partition ${this.partition}: the log was opened read-only`);
    const first = this.next_position;
    this.next_position += records.length;
    const last = this.next_position - 1;
    await this.writer.write((batch) => {
      for (let i = 0; i < records.length; i++) batch.put(logTable.recordKey(this.partition, first + i), records[i]!);
      for (const [key, value] of writes) {
        if (value === null) batch.del(key);
        else batch.put(key, value);
      }
      batch.put(logTable.appliedKey(this.partition), logTable.encodeApplied(last));
    }, sync);
    assert(last >= this.written, () => `partition ${this.partition}: append through ${last} completed after ${this.written}`);
    this.written = last;
    this.trim();
    return last;
  }

  /**
   * Deletes what fell out of the window once a chunk of it has, one range at a time. Appends only
   * write above the window, so the range never meets them; a crash midway leaves records that
   * the next `open` deletes.
   */
  private trim(): void {
    const through = this.written - this.retained_records;
    if (this.retained_records === 0 || this.trimming || through - this.trimmed_through < this.trim_chunk) return;
    this.trimming = true;
    const after = this.trimmed_through;
    this.trimmed_through = through;
    logTable
      .clearThrough(this.db, this.partition, through, after)
      // Not synced: a mark lost in a crash only makes the next trim start earlier.
      .then(() => this.db.put(logTable.trimmedKey(this.partition), Buffer.from(String(through))))
      .then(
        () => {
          this.trimming = false;
          this.trim(); // what more fell out of the window meanwhile
        },
        () => {
          this.trimming = false;
          this.trimmed_through = after; // tried again from there at the next append (the store may be closing)
        },
      );
  }

  read(from = 1): AsyncIterable<[position: number, record: Buffer]> {
    return logTable.scan(this.db, this.partition, from);
  }

  async first_position(): Promise<number> {
    return (await logTable.firstPosition(this.db, this.partition)) ?? this.next_position;
  }
}
