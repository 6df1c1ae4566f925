import type { GroupWriter } from '../storage/group-writer.js';
import type { Db } from '../storage/store.js';
import { pad } from '../storage/store.js';

/** A state write that travels in the same atomic batch as the log records that produced it. */
export type StateWrite = [key: string, value: Buffer | null];

/**
 * The append-only log of one partition in the embedded store. Records are numbered from 1;
 * `applied` is the last position whose state is stored. Only this module knows the key layout
 * of the log, so that the log can move to another implementation behind the same methods.
 */
export class PartitionLog {
  private next_position: number;

  private constructor(
    private readonly db: Db,
    private readonly writer: GroupWriter | undefined,
    readonly partition: number,
    applied: number,
  ) {
    this.next_position = applied + 1;
  }

  /** Opens the log; without a writer it can only be read. */
  static async open(db: Db, partition: number, writer?: GroupWriter): Promise<PartitionLog> {
    const raw = await db.get(appliedKey(partition));
    const applied = raw === undefined ? 0 : Number(raw.toString('utf8'));
    if (!Number.isSafeInteger(applied) || applied < 0) throw new Error(`partition ${partition}: corrupt applied position`);
    return new PartitionLog(db, writer, partition, applied);
  }

  get applied_position(): number {
    return this.next_position - 1;
  }

  /**
   * Appends `records` and applies `writes` in one atomic batch; `sync` makes it durable against
   * a machine crash (fsync), otherwise it is durable against a process crash.
   */
  async append(records: Buffer[], writes: StateWrite[], sync: boolean): Promise<number> {
    if (this.writer === undefined) throw new Error(`partition ${this.partition}: the log was opened read-only`);
    const first = this.next_position;
    this.next_position += records.length;
    const last = this.next_position - 1;
    await this.writer.write((batch) => {
      for (let i = 0; i < records.length; i++) batch.put(logKey(this.partition, first + i), records[i]!);
      for (const [key, value] of writes) {
        if (value === null) batch.del(key);
        else batch.put(key, value);
      }
      batch.put(appliedKey(this.partition), Buffer.from(String(last)));
    }, sync);
    return last;
  }

  /** Records from `from` (inclusive) on, in order. */
  async *read(from = 1): AsyncGenerator<[position: number, record: Buffer]> {
    const prefix = `p${this.partition}/log/`;
    for await (const [key, value] of this.db.iterator({ gte: prefix + pad(from), lt: prefix + '~' })) {
      yield [Number(key.slice(prefix.length)), value];
    }
  }
}

function logKey(partition: number, position: number): string {
  return `p${partition}/log/${pad(position)}`;
}

function appliedKey(partition: number): string {
  return `p${partition}/applied`;
}
