// Table `live`: the ids of a partition's invocations that have not completed. Recovery loads
// exactly these; without the index it would read (and parse) every retained completed status,
// which grows with every invocation kept for its retention.
import { keysIn, type Db } from '../store.js';
import { tablePrefix, tableRange } from '../keys.js';

const TABLE = 'live';
const EMPTY = Buffer.alloc(0);

export const liveTable = {
  key: (partition: number, id: string): string => `${tablePrefix(partition, TABLE)}${id}`,
  value: EMPTY,

  async *scan(db: Db, partition: number): AsyncGenerator<string> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const key of keysIn(db, tableRange(partition, TABLE))) yield key.slice(prefix.length);
  },
};
