// Table `live`: the ids of a partition's invocations that have not completed. The admin API's
// scans of unfinished invocations read these rather than every retained completed status.
import { keysIn, type Db } from '../store.js';
import { idKeyText, idOfKeyText, tablePrefix, tableRange } from '../keys.js';

const TABLE = 'live';
const EMPTY = Buffer.alloc(0);

export const liveTable = {
  key: (partition: number, id: string): string => `${tablePrefix(partition, TABLE)}${idKeyText(id)}`,
  range: (partition: number): { gte: string; lt: string } => tableRange(partition, TABLE),
  value: EMPTY,

  async *scan(db: Db, partition: number): AsyncGenerator<string> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const key of keysIn(db, tableRange(partition, TABLE))) yield idOfKeyText(key.slice(prefix.length));
  },
};
