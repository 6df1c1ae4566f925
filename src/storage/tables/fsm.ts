// Table `fsm`: a partition's own counters (inbox and outbox sequences), one JSON value.
import type { Db } from '../store.js';
import { statePrefix } from '../keys.js';

export interface Counters {
  inbox_seq: number;
  outbox_seq: number;
  /** Timers stored (format 3; the upgrade from 2 counts them). */
  timers: number;
}

/** A partition that has written nothing: what a rebuild from its first record starts from too. */
export const EMPTY_COUNTERS: Readonly<Counters> = { inbox_seq: 0, outbox_seq: 0, timers: 0 };

export const fsmTable = {
  key: (partition: number): string => `${statePrefix(partition)}counters`,
  encode: (c: Counters): Buffer => Buffer.from(JSON.stringify(c)),

  async read(db: Db, partition: number): Promise<Counters> {
    const raw = await db.get(fsmTable.key(partition));
    return raw === undefined ? { ...EMPTY_COUNTERS } : (JSON.parse(raw.toString('utf8')) as Counters);
  },
};
