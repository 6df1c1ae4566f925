// Table `lock`: which invocation holds the exclusive lock of a virtual object or workflow key.
import { entriesIn, type Db } from '../store.js';
import { tablePrefix, tableRange } from '../keys.js';

const TABLE = 'lock';

export const locksTable = {
  key: (partition: number, objectKey: string): string => `${tablePrefix(partition, TABLE)}${objectKey}`,
  encode: (id: string): Buffer => Buffer.from(id),

  async *scan(db: Db, partition: number): AsyncGenerator<[objectKey: string, id: string]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) yield [key.slice(prefix.length), value.toString('utf8')];
  },
};
