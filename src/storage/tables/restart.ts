// Table `restart`: the ids of a partition's invocations that run or back off — what a restart
// must start again. Recovery reads only these: an invocation that sleeps, waits for a lock or is
// paused needs nothing until a command reaches it, and its status is read then (format 4).
import { keysIn, type Db } from '../store.js';
import { idKeyText, idOfKeyText, tablePrefix, tableRange } from '../keys.js';

const TABLE = 'restart';
const EMPTY = Buffer.alloc(0);

export const restartTable = {
  key: (partition: number, id: string): string => `${tablePrefix(partition, TABLE)}${idKeyText(id)}`,
  range: (partition: number): { gte: string; lt: string } => tableRange(partition, TABLE),
  value: EMPTY,

  async *scan(db: Db, partition: number): AsyncGenerator<string> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const key of keysIn(db, tableRange(partition, TABLE))) yield idOfKeyText(key.slice(prefix.length));
  },
};
