// Table `outbox`: commands for other partitions, by sequence, until their delivery is recorded.
import { assert } from '../../common/assert.js';
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
/** First byte of an entry: JSON (`{`, what stores hold from before the binary encoding) or binary. */
const FORMAT_JSON = 0x7b;
const FORMAT_BINARY = 0x01;
const HEADER_BYTES = 3;

export const outboxTable = {
  key: (partition: number, seq: number): string => `${tablePrefix(partition, TABLE)}${pad(seq)}`,
  /**
   * FORMAT_BINARY, the target's length (u16, big-endian), the target (ASCII), then the command as
   * the fold encoded it: written and read without a copy of the command through base64 and JSON.
   */
  encode(e: OutboxEntry): Buffer {
    const targetBytes = Buffer.byteLength(e.target, 'utf8');
    assert(targetBytes === e.target.length && targetBytes <= 0xffff, () => `outbox target ${JSON.stringify(e.target.slice(0, 80))} is not a short ASCII id`);
    const out = Buffer.allocUnsafe(HEADER_BYTES + targetBytes + e.command.length);
    out[0] = FORMAT_BINARY;
    out.writeUInt16BE(targetBytes, 1);
    out.write(e.target, HEADER_BYTES, 'latin1');
    e.command.copy(out, HEADER_BYTES + targetBytes);
    return out;
  },

  /** An entry as stored: binary, or JSON with the command in base64 (format 5's). */
  decode(partition: number, key: string, value: Buffer): OutboxEntry {
    const seq = Number(key.slice(tablePrefix(partition, TABLE).length));
    if (value[0] === FORMAT_JSON) {
      const e = JSON.parse(value.toString('utf8')) as { target: string; command: string };
      return { seq, target: e.target, command: Buffer.from(e.command, 'base64') };
    }
    if (value[0] !== FORMAT_BINARY || value.length < HEADER_BYTES) throw new Error(`partition ${partition}: corrupt outbox entry ${seq} (first byte ${value[0]}, ${value.length} bytes)`);
    const end = HEADER_BYTES + value.readUInt16BE(1);
    if (end > value.length) throw new Error(`partition ${partition}: corrupt outbox entry ${seq} (target of ${end - HEADER_BYTES} bytes in ${value.length})`);
    return { seq, target: value.toString('latin1', HEADER_BYTES, end), command: value.subarray(end) };
  },

  /** Whether two stored values of `key` are the same entry, whichever encoding each is in (the rebuild check); a corrupt one is not. */
  same(partition: number, key: string, a: Buffer, b: Buffer): boolean {
    if (a.equals(b)) return true;
    if (!key.startsWith(tablePrefix(partition, TABLE))) return false;
    try {
      const [x, y] = [outboxTable.decode(partition, key, a), outboxTable.decode(partition, key, b)];
      return x.target === y.target && x.command.equals(y.command);
    } catch {
      return false;
    }
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
