// Table `outbox`: commands for other partitions, by sequence, until their delivery is recorded.
import { entriesIn, type Db } from '../store.js';
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

  /** Every pending entry, in sequence order. */
  async *scan(db: Db, partition: number): AsyncGenerator<OutboxEntry> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) {
      const e = JSON.parse(value.toString('utf8')) as { target: string; command: string };
      yield { seq: Number(key.slice(prefix.length)), target: e.target, command: Buffer.from(e.command, 'base64') };
    }
  },
};
