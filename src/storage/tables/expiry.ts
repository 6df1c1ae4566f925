// Table `expiry`: when a completed invocation's retention ends, by due time, so that the cleaner
// reads only what is due instead of every retained status. The value says what goes: the journal
// only (journal retention shorter than the completion's) or the whole invocation.
import { entriesIn, type Db } from '../store.js';
import { pad, tablePrefix } from '../keys.js';

export type ExpiryScope = 'journal' | 'all';

const TABLE = 'expiry';

export const expiryTable = {
  key: (partition: number, due_ms: number, id: string): string => `${tablePrefix(partition, TABLE)}${pad(Math.max(0, due_ms))}/${id}`,
  encode: (scope: ExpiryScope): Buffer => Buffer.from(scope),

  /** Entries due at or before `now_ms`, oldest first, at most `limit`. */
  async due(db: Db, partition: number, now_ms: number, limit: number): Promise<Array<{ id: string; due_ms: number; scope: ExpiryScope }>> {
    const prefix = tablePrefix(partition, TABLE);
    const out: Array<{ id: string; due_ms: number; scope: ExpiryScope }> = [];
    for await (const [key, value] of entriesIn(db, { gte: prefix, lte: `${prefix}${pad(Math.max(0, now_ms))}/~`, limit })) {
      const [due, id] = key.slice(prefix.length).split('/');
      out.push({ id: id!, due_ms: Number(due), scope: value.toString('utf8') === 'journal' ? 'journal' : 'all' });
    }
    return out;
  },
};
