// Table `log`: a partition's log records by position (from 1), and the last applied position.
import { entriesIn, keysIn, type Db } from '../store.js';
import { pad, partitionPrefix } from '../keys.js';

export interface LogCursor {
  offset: number;
  epoch: number;
  position: number;
}

const logPrefix = (partition: number) => `${partitionPrefix(partition)}log/`;

export const logTable = {
  recordKey: (partition: number, position: number): string => `${logPrefix(partition)}${pad(position)}`,
  appliedKey: (partition: number): string => `${partitionPrefix(partition)}applied`,
  encodeApplied: (position: number): Buffer => Buffer.from(String(position)),
  /**
   * Where the last completed trim ended: the next starts past it. Without it an open would
   * start at the first position and walk the tombstones of every record trimmed before, on the
   * store's threads, until compaction drops them (at a million invocations, seconds of a start).
   */
  trimmedKey: (partition: number): string => `${partitionPrefix(partition)}trimmed`,
  /**
   * A log in Kafka: where the applied position ends in the topic (the next offset to read) and
   * the epoch state of a reader there. Written with the applied position, in the same batch.
   */
  cursorKey: (partition: number): string => `${partitionPrefix(partition)}cursor`,
  encodeCursor: (cursor: LogCursor): Buffer => Buffer.from(JSON.stringify({ offset: cursor.offset, epoch: cursor.epoch, position: cursor.position })),

  async readCursor(db: Db, partition: number): Promise<LogCursor | undefined> {
    const raw = await db.get(logTable.cursorKey(partition));
    return raw === undefined ? undefined : logTable.decodeCursor(partition, raw);
  },

  decodeCursor(partition: number, raw: Buffer): LogCursor {
    const cursor = JSON.parse(raw.toString('utf8')) as LogCursor;
    for (const field of ['offset', 'epoch', 'position'] as const) {
      if (!Number.isSafeInteger(cursor[field]) || cursor[field] < 0) throw new Error(`partition ${partition}: corrupt log cursor ${raw.toString('utf8')}`);
    }
    return cursor;
  },

  async readTrimmed(db: Db, partition: number): Promise<number> {
    const raw = await db.get(logTable.trimmedKey(partition));
    return raw === undefined ? 0 : Number(raw.toString('utf8'));
  },

  async readApplied(db: Db, partition: number): Promise<number> {
    const raw = await db.get(logTable.appliedKey(partition));
    return raw === undefined ? 0 : Number(raw.toString('utf8'));
  },

  /** The position of the oldest record held, if any. */
  async firstPosition(db: Db, partition: number): Promise<number | undefined> {
    const prefix = logPrefix(partition);
    for await (const key of keysIn(db, { gte: prefix, lt: `${prefix}~`, limit: 1 })) return Number(key.slice(prefix.length));
    return undefined;
  },

  /**
   * Deletes the records up to `position` (inclusive): all of them, or those after `after` when the
   * ones up to it are gone already (the range then starts past their tombstones).
   */
  clearThrough: (db: Db, partition: number, position: number, after = 0): Promise<void> =>
    db.clear({ gte: after > 0 ? logTable.recordKey(partition, after + 1) : logPrefix(partition), lte: logTable.recordKey(partition, position) }),

  /** Records from `from` (inclusive) on, in order. */
  async *scan(db: Db, partition: number, from: number): AsyncGenerator<[position: number, record: Buffer]> {
    const prefix = logPrefix(partition);
    for await (const [key, value] of entriesIn(db, { gte: prefix + pad(from), lt: `${prefix}~` })) yield [Number(key.slice(prefix.length)), value];
  },
};
