// Table `statekeys`: per virtual object or workflow, the keys of its state (base64url, sorted):
// the fold lists, clears or replaces an object's state with one synchronous read, and so never
// needs the object's state in memory (the store has no synchronous range scan).
import { keysIn, type Db } from '../store.js';
import { objectKeyOf, splitObjectKey, tablePrefix } from '../keys.js';
import { stateTable } from './state.js';

const TABLE = 'statekeys';

export const stateKeysTable = {
  key: (partition: number, objectKey: string): string => `${tablePrefix(partition, TABLE)}${objectKey}`,
  encode: (keys: readonly string[]): Buffer => Buffer.from(JSON.stringify(keys)),
  decode: (raw: Buffer): string[] => JSON.parse(raw.toString('utf8')) as string[],

  /**
   * Object keys with state of `service` (the unscoped ones, which share a prefix, then those of
   * every scope, filtered) in key order after `after` (from the start without): at most `limit`
   * read. `next` to go on from; none at the end.
   */
  async objectsOf(db: Db, partition: number, service: string, after: string | undefined, limit: number): Promise<{ objectKeys: string[]; next?: string }> {
    const prefix = tablePrefix(partition, TABLE);
    const unscoped = `${prefix}${objectKeyOf(service, '')}`;
    // Scoped object keys start with ':' (storage/keys.ts objectKeyOf; ';' is the next character).
    // The two ranges are disjoint; in key order, so that one cursor goes through both.
    const ranges = [
      { gte: unscoped, lt: `${unscoped}\uffff`, scoped: false },
      { gte: `${prefix}:`, lt: `${prefix};`, scoped: true },
    ].sort((a, b) => (a.gte < b.gte ? -1 : 1));
    const cursor = after === undefined ? undefined : `${prefix}${after}`;
    const objectKeys: string[] = [];
    let read = 0;
    for (const r of ranges) {
      if (cursor !== undefined && cursor >= r.lt) continue;
      const range = cursor !== undefined && cursor >= r.gte ? { gt: cursor, lt: r.lt } : { gte: r.gte, lt: r.lt };
      for await (const key of keysIn(db, { ...range, limit: limit - read })) {
        read++;
        const objectKey = key.slice(prefix.length);
        if (!r.scoped || splitObjectKey(objectKey).service === service) objectKeys.push(objectKey);
        if (read === limit) return { objectKeys, next: objectKey };
      }
    }
    return { objectKeys };
  },

  /**
   * Builds the index of a partition from its state table (a store written before the index
   * existed); returns the number of objects indexed.
   */
  async build(db: Db, partition: number): Promise<number> {
    let objects = 0;
    let current: string | undefined;
    let keys: string[] = [];
    const flush = async (): Promise<void> => {
      if (current === undefined) return;
      await db.put(stateKeysTable.key(partition, current), stateKeysTable.encode(keys));
      objects++;
    };
    for await (const [objectKey, stateKey] of stateTable.scanKeys(db, partition)) {
      if (objectKey !== current) {
        await flush();
        [current, keys] = [objectKey, []];
      }
      keys.push(stateKey);
    }
    await flush();
    return objects;
  },
};
