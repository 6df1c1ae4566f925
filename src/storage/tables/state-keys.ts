// Table `statekeys`: per virtual object or workflow, the keys of its state (base64url, sorted):
// the fold lists, clears or replaces an object's state with one synchronous read, and so never
// needs the object's state in memory (the store has no synchronous range scan).
import { keysIn, type Db } from '../store.js';
import { tablePrefix } from '../keys.js';
import { stateTable } from './state.js';

const TABLE = 'statekeys';

export const stateKeysTable = {
  key: (partition: number, objectKey: string): string => `${tablePrefix(partition, TABLE)}${objectKey}`,
  encode: (keys: readonly string[]): Buffer => Buffer.from(JSON.stringify(keys)),
  decode: (raw: Buffer): string[] => JSON.parse(raw.toString('utf8')) as string[],

  /** Up to `limit` object keys of the partition in key order, after `after` (from the start without); `next` to go on from, none at the end. */
  async objectsAfter(db: Db, partition: number, after: string | undefined, limit: number): Promise<{ objectKeys: string[]; next?: string }> {
    const prefix = tablePrefix(partition, TABLE);
    const objectKeys: string[] = [];
    const range = after === undefined ? { gte: prefix, lt: `${prefix}~`, limit } : { gt: `${prefix}${after}`, lt: `${prefix}~`, limit };
    for await (const key of keysIn(db, range)) objectKeys.push(key.slice(prefix.length));
    return objectKeys.length < limit ? { objectKeys } : { objectKeys, next: objectKeys[objectKeys.length - 1]! };
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
