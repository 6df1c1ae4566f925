// Table `timer`: durable timers ordered by due time; the key holds everything, the value is empty.
import { keysIn, type Db } from '../store.js';
import { pad, tablePrefix, tableRange } from '../keys.js';

export interface Timer {
  id: string;
  completion_id: number;
  wake_up_ms: number;
  /** TimerFired.Kind: 0 a sleep's completion, 1 a scheduled invocation's start. */
  kind: number;
}

const TABLE = 'timer';

export const timersTable = {
  key: (partition: number, t: Timer): string => `${tablePrefix(partition, TABLE)}${pad(t.wake_up_ms)}/${t.id}/${t.kind}.${t.completion_id}`,

  parse(partition: number, key: string): Timer {
    const [wake, id, kindAndCid] = key.slice(tablePrefix(partition, TABLE).length).split('/');
    const [kind, cid] = kindAndCid!.split('.');
    return { wake_up_ms: Number(wake), id: id!, completion_id: Number(cid), kind: Number(kind) };
  },

  async *scan(db: Db, partition: number): AsyncGenerator<[key: string, timer: Timer]> {
    for await (const key of keysIn(db, tableRange(partition, TABLE))) yield [key, timersTable.parse(partition, key)];
  },

  /** The first `limit` timers after `afterKey` (from the first when undefined), in due order. */
  async after(db: Db, partition: number, afterKey: string | undefined, limit: number): Promise<Array<[key: string, timer: Timer]>> {
    const range = tableRange(partition, TABLE);
    const keys = await db.keys({ ...(afterKey === undefined ? { gte: range.gte } : { gt: afterKey }), lt: range.lt, limit }).all();
    return keys.map((key) => [key, timersTable.parse(partition, key)]);
  },

  /** How many timers a partition stores (a store written before the count was kept). */
  async count(db: Db, partition: number): Promise<number> {
    let n = 0;
    for await (const _ of keysIn(db, tableRange(partition, TABLE))) n++;
    return n;
  },
};
