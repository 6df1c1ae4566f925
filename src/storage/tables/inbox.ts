// Table `inbox`: invocations waiting for a key's lock, by object key and arrival sequence.
import { entriesIn, type Db } from '../store.js';
import { pad, tablePrefix, tableRange } from '../keys.js';

export interface InboxEntry {
  id: string;
  seq: number;
}

const TABLE = 'inbox';

export const inboxTable = {
  key: (partition: number, objectKey: string, seq: number): string => `${tablePrefix(partition, TABLE)}${objectKey}/${pad(seq)}`,
  encode: (id: string): Buffer => Buffer.from(id),

  async *scan(db: Db, partition: number): AsyncGenerator<[objectKey: string, entry: InboxEntry]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) {
      const rest = key.slice(prefix.length);
      const cut = rest.lastIndexOf('/');
      yield [rest.slice(0, cut), { id: value.toString('utf8'), seq: Number(rest.slice(cut + 1)) }];
    }
  },
};
