// Table `dedup`: per source partition, the last outbox sequence applied from it.
import { entriesIn, type Db } from '../store.js';
import { tablePrefix, tableRange } from '../keys.js';

const TABLE = 'dedup';

export const dedupTable = {
  key: (partition: number, source: number): string => `${tablePrefix(partition, TABLE)}${source}`,
  encode: (seq: number): Buffer => Buffer.from(String(seq)),

  async *scan(db: Db, partition: number): AsyncGenerator<[source: number, seq: number]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) yield [Number(key.slice(prefix.length)), Number(value.toString('utf8'))];
  },
};
