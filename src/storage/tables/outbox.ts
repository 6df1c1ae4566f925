// Table `outbox`: commands for other partitions, by sequence, until their delivery is recorded.
import { entriesIn, keysIn, type Db } from '../store.js';
import { pad, tablePrefix, tableRange } from '../keys.js';

export interface OutboxEntry {
  seq: number;
  /** Invocation id (text) whose partition receives the command. */
  target: string;
  /** The encoded Command to append there. */
  command: Buffer;
}

const TABLE = 'outbox';

export const outboxTable = {
  key: (partition: number, seq: number): string => `${tablePrefix(partition, TABLE)}${pad(seq)}`,
  encode: (e: OutboxEntry): Buffer => Buffer.from(JSON.stringify({ target: e.target, command: e.command.toString('base64') })),

  decode(partition: number, key: string, value: Buffer): OutboxEntry {
    const e = JSON.parse(value.toString('utf8')) as { target: string; command: string };
    return { seq: Number(key.slice(tablePrefix(partition, TABLE).length)), target: e.target, command: Buffer.from(e.command, 'base64') };
  },

  /** Every pending entry, in sequence order. */
  async *scan(db: Db, partition: number): AsyncGenerator<OutboxEntry> {
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) yield outboxTable.decode(partition, key, value);
  },

  /** Up to `limit` pending entries from sequence `from_seq` on, in order. */
  async read(db: Db, partition: number, from_seq: number, limit: number): Promise<OutboxEntry[]> {
    const entries = await db.iterator({ gte: outboxTable.key(partition, from_seq), lt: tableRange(partition, TABLE).lt, limit }).all();
    return entries.map(([key, value]) => outboxTable.decode(partition, key, value));
  },

  /** Pending entries (for the upgrade that counts them). */
  async count(db: Db, partition: number): Promise<number> {
    let n = 0;
    for await (const _ of keysIn(db, tableRange(partition, TABLE))) n++;
    return n;
  },

  /** The highest sequence stored, or 0. */
  async last(db: Db, partition: number): Promise<number> {
    const [key] = await db.keys({ ...tableRange(partition, TABLE), reverse: true, limit: 1 }).all();
    return key === undefined ? 0 : Number(key.slice(tablePrefix(partition, TABLE).length));
  },
};
