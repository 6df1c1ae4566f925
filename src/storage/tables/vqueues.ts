// Table `vq`: invocations of a scope waiting for a concurrency slot, one queue per (scope, limit
// key), highest priority first, then in arrival order. Scopes and limit-key levels are
// [a-zA-Z0-9_.-] (checked where they enter), so `:` cannot occur in them and separates the parts
// of a key: `scope:limitKey:rank:seq`, the limit key possibly empty, rank = MAX_PRIORITY -
// priority and the sequence zero-padded, so that a scan gives each queue in its order.
import { assert } from '../../common/assert.js';
import { entriesIn, type Db } from '../store.js';
import { pad, tablePrefix, tableRange } from '../keys.js';

export interface VqueueEntry {
  id: string;
  seq: number;
  /** 0 (the default) to MAX_PRIORITY: a higher one goes ahead of every lower one of its queue. */
  priority: number;
}

export const MAX_PRIORITY = 9;

const TABLE = 'vq';
const SEP = ':';

export const vqueuesTable = {
  key: (partition: number, scope: string, limitKey: string, e: VqueueEntry): string => {
    assert(!scope.includes(SEP) && !limitKey.includes(SEP), () => `vqueue key of scope '${scope}', limit key '${limitKey}'`);
    assert(Number.isInteger(e.priority) && e.priority >= 0 && e.priority <= MAX_PRIORITY, () => `vqueue entry ${e.id} of priority ${e.priority}`);
    return `${tablePrefix(partition, TABLE)}${scope}${SEP}${limitKey}${SEP}${MAX_PRIORITY - e.priority}${SEP}${pad(e.seq)}`;
  },
  encode: (id: string): Buffer => Buffer.from(id),

  async *scan(db: Db, partition: number): AsyncGenerator<[scope: string, limitKey: string, entry: VqueueEntry]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) {
      const [scope, limitKey, rank, seq] = key.slice(prefix.length).split(SEP);
      assert(scope !== undefined && limitKey !== undefined && rank !== undefined && seq !== undefined, () => `partition ${partition}: malformed vqueue key ${key}`);
      yield [scope, limitKey, { id: value.toString('utf8'), seq: Number(seq), priority: MAX_PRIORITY - Number(rank) }];
    }
  },
};
