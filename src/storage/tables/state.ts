// Table `state`: state entries of virtual objects and workflows, by object key and state key
// (the state key as base64url, so any bytes fit in a key).
import { entriesIn, keysIn, type Db } from '../store.js';
import { tablePrefix, tableRange } from '../keys.js';

const TABLE = 'state';

export const stateTable = {
  key: (partition: number, objectKey: string, stateKey: string): string => `${tablePrefix(partition, TABLE)}${objectKey}/${stateKey}`,

  /** Splits a key of this table into object key and state key (base64url: no '/'). */
  parse(partition: number, key: string): [objectKey: string, stateKey: string] {
    const rest = key.slice(tablePrefix(partition, TABLE).length);
    const cut = rest.lastIndexOf('/');
    return [rest.slice(0, cut), rest.slice(cut + 1)];
  },

  /** Every entry, by object key then state key. */
  async *scan(db: Db, partition: number): AsyncGenerator<[objectKey: string, stateKey: string, value: Buffer]> {
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) yield [...stateTable.parse(partition, key), value];
  },

  async *scanKeys(db: Db, partition: number): AsyncGenerator<[objectKey: string, stateKey: string]> {
    for await (const key of keysIn(db, tableRange(partition, TABLE))) yield stateTable.parse(partition, key);
  },
};
