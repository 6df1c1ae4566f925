// Table `vq`: invocations of a scope waiting for a concurrency slot, one queue per (scope, limit
// key), in arrival order. Scopes and limit-key levels are [a-zA-Z0-9_.-] (checked where they
// enter), so `:` cannot occur in them and separates the parts of a key: `scope:limitKey:seq`,
// the limit key possibly empty, the sequence zero-padded so that a scan gives each queue in order.
import { assert } from '../../common/assert.js';
import { entriesIn, type Db } from '../store.js';
import { pad, tablePrefix, tableRange } from '../keys.js';

export interface VqueueEntry {
  id: string;
  seq: number;
}

const TABLE = 'vq';
const SEP = ':';

export const vqueuesTable = {
  key: (partition: number, scope: string, limitKey: string, seq: number): string => {
    assert(!scope.includes(SEP) && !limitKey.includes(SEP), () => `vqueue key of scope '${scope}', limit key '${limitKey}'`);
    return `${tablePrefix(partition, TABLE)}${scope}${SEP}${limitKey}${SEP}${pad(seq)}`;
  },
  encode: (id: string): Buffer => Buffer.from(id),

  async *scan(db: Db, partition: number): AsyncGenerator<[scope: string, limitKey: string, entry: VqueueEntry]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) {
      const [scope, limitKey, seq] = key.slice(prefix.length).split(SEP);
      assert(scope !== undefined && limitKey !== undefined && seq !== undefined, () => `partition ${partition}: malformed vqueue key ${key}`);
      yield [scope, limitKey, { id: value.toString('utf8'), seq: Number(seq) }];
    }
  },
};
