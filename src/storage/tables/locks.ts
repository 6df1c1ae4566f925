// Table `lock`: which invocation holds the exclusive lock of a virtual object or workflow key, and
// since when (the log's time; `<id> <ms>`: an id holds no space). Values written before Keel kept the
// time (format 4 and before) are the id alone: read as held since no known time.
import { entriesIn, type Db } from '../store.js';
import { tablePrefix, tableRange } from '../keys.js';

const TABLE = 'lock';

export const locksTable = {
  key: (partition: number, objectKey: string): string => `${tablePrefix(partition, TABLE)}${objectKey}`,
  encode: (id: string, acquired_at_ms: number): Buffer => Buffer.from(`${id} ${acquired_at_ms}`),

  decode(raw: Buffer): { id: string; acquired_at_ms?: number } {
    const text = raw.toString('utf8');
    const space = text.indexOf(' ');
    return space < 0 ? { id: text } : { id: text.slice(0, space), acquired_at_ms: Number(text.slice(space + 1)) };
  },

  async *scan(db: Db, partition: number): AsyncGenerator<[objectKey: string, holder: { id: string; acquired_at_ms?: number }]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) yield [key.slice(prefix.length), locksTable.decode(value)];
  },
};
