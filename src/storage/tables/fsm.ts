// Table `fsm`: a partition's own counters (inbox and outbox sequences), one JSON value.
import type { Db } from '../store.js';
import { statePrefix } from '../keys.js';

export interface Counters {
  inbox_seq: number;
  outbox_seq: number;
  /** Timers stored (absent in stores written before it was kept: counted once at open). */
  timers?: number;
}

export const fsmTable = {
  key: (partition: number): string => `${statePrefix(partition)}counters`,
  encode: (c: Counters): Buffer => Buffer.from(JSON.stringify(c)),

  async read(db: Db, partition: number): Promise<Counters> {
    const raw = await db.get(fsmTable.key(partition));
    return raw === undefined ? { inbox_seq: 0, outbox_seq: 0 } : (JSON.parse(raw.toString('utf8')) as Counters);
  },
};
