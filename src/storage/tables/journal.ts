// Table `j`: journal entries by invocation id (keys.ts's `idKeyText`) and index; value = u16
// message type + payload.
import { valuesIn, type Db } from '../store.js';
import { idKeyText, pad, tablePrefix, tableRange } from '../keys.js';

export interface JournalEntry {
  type: number;
  payload: Buffer;
}

const TABLE = 'j';
const INDEX_WIDTH = 8;

function range(partition: number, id: string): { gte: string; lt: string } {
  const prefix = `${tablePrefix(partition, TABLE)}${idKeyText(id)}/`;
  return { gte: prefix, lt: `${prefix}~` };
}

export const journalTable = {
  key: (partition: number, id: string, index: number): string => `${tablePrefix(partition, TABLE)}${idKeyText(id)}/${pad(index, INDEX_WIDTH)}`,

  range: (partition: number): { gte: string; lt: string } => tableRange(partition, TABLE),

  encode(e: JournalEntry): Buffer {
    const out = Buffer.allocUnsafe(2 + e.payload.length);
    out.writeUInt16BE(e.type, 0);
    out.set(e.payload, 2);
    return out;
  },

  decode(raw: Buffer): JournalEntry {
    return { type: raw.readUInt16BE(0), payload: raw.subarray(2) };
  },

  /** The whole stored journal of one invocation, in order. */
  async read(db: Db, partition: number, id: string): Promise<JournalEntry[]> {
    const out: JournalEntry[] = [];
    for await (const value of valuesIn(db, range(partition, id))) out.push(journalTable.decode(value));
    return out;
  },

  /**
   * The first `length` entries of one journal (fewer if fewer are stored), by synchronous point
   * reads through `get`: a partition reads a live invocation's journal when it first needs it, in
   * the middle of a fold, and a point read (~5 µs) is far cheaper than an iterator's round trips.
   */
  readSync(get: (key: string) => Buffer | undefined, partition: number, id: string, length: number): JournalEntry[] {
    const out: JournalEntry[] = [];
    for (let i = 0; i < length; i++) {
      const raw = get(journalTable.key(partition, id, i));
      if (raw === undefined) break;
      out.push(journalTable.decode(raw));
    }
    return out;
  },

  /** One entry, or undefined when it is not stored (journal retention). */
  async entry(db: Db, partition: number, id: string, index: number): Promise<JournalEntry | undefined> {
    const raw = await db.get(journalTable.key(partition, id, index));
    return raw === undefined ? undefined : journalTable.decode(raw);
  },
};
