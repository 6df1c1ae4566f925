// Table `state`: state entries of virtual objects and workflows, by object key and state key
// (the state key as base64url, so any bytes fit in a key).
import { entriesIn, type Db } from '../store.js';
import { tablePrefix, tableRange } from '../keys.js';

const TABLE = 'state';

export const stateTable = {
  key: (partition: number, objectKey: string, stateKey: string): string => `${tablePrefix(partition, TABLE)}${objectKey}/${stateKey}`,

  async *scan(db: Db, partition: number): AsyncGenerator<[objectKey: string, stateKey: string, value: Buffer]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) {
      const rest = key.slice(prefix.length);
      const cut = rest.lastIndexOf('/');
      yield [rest.slice(0, cut), rest.slice(cut + 1), value];
    }
  },
};
