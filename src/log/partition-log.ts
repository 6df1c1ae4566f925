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

/** The log in the embedded store, written through the store's group commit. */
export class EmbeddedLog implements PartitionLog {
  private next_position: number;

  private constructor(
    private readonly db: Db,
    private readonly writer: GroupWriter | undefined,
    readonly partition: number,
    applied: number,
    private readonly retained_records: number,
  ) {
    this.next_position = applied + 1;
  }

  /**
   * Opens the log; without a writer it can only be read. With `retained_records` > 0 each append
   * deletes, in its own batch, the records that fall out of the newest `retained_records`: their
   * keys are known, so trimming costs no scan and the log stays bounded.
   */
  static async open(db: Db, partition: number, writer?: GroupWriter, retained_records = 0): Promise<EmbeddedLog> {
    const applied = await logTable.readApplied(db, partition);
    if (!Number.isSafeInteger(applied) || applied < 0) throw new Error(`partition ${partition}: corrupt applied position`);
    assert(Number.isSafeInteger(retained_records) && retained_records >= 0, () => `retained_records ${retained_records}`);
    const log = new EmbeddedLog(db, writer, partition, applied, retained_records);
    // Records older than the window (a store from before trimming, or a smaller window now) go
    // at once, in the background: nothing reads them, and new appends never touch their keys.
    if (writer !== undefined && retained_records > 0 && applied > retained_records) void logTable.clearThrough(db, partition, applied - retained_records).catch(() => {});
    return log;
  }

  get applied_position(): number {
    return this.next_position - 1;
  }

  async append(records: Buffer[], writes: StateWrite[], sync: boolean): Promise<number> {
    if (this.writer === undefined) throw new Error(`partition ${this.partition}: the log was opened read-only`);
    const first = this.next_position;
    this.next_position += records.length;
    const last = this.next_position - 1;
    await this.writer.write((batch) => {
      for (let i = 0; i < records.length; i++) batch.put(logTable.recordKey(this.partition, first + i), records[i]!);
      if (this.retained_records > 0) {
        for (let p = Math.max(1, first - this.retained_records); p <= last - this.retained_records; p++) batch.del(logTable.recordKey(this.partition, p));
      }
      for (const [key, value] of writes) {
        if (value === null) batch.del(key);
        else batch.put(key, value);
      }
      batch.put(logTable.appliedKey(this.partition), logTable.encodeApplied(last));
    }, sync);
    return last;
  }

  read(from = 1): AsyncIterable<[position: number, record: Buffer]> {
    return logTable.scan(this.db, this.partition, from);
  }

  async first_position(): Promise<number> {
    return (await logTable.firstPosition(this.db, this.partition)) ?? this.next_position;
  }
}
