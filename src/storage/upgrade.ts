// Brings a worker store of an older format version to the current one, in place, at open.
import type { Db } from './store.js';
import { partitionPrefix } from './keys.js';
import { stateKeysTable } from './tables/state-keys.js';

/** Partitions looked for in a store being upgraded (one seek each; an unused partition has no keys). */
const MAX_UPGRADED_PARTITIONS = 4096;

/** 2 → 3: each partition's `statekeys` index, built from its state table. */
export async function upgradeWorkerStore(db: Db, from: number): Promise<void> {
  if (from > 2) return;
  for (let p = 0; p < MAX_UPGRADED_PARTITIONS; p++) {
    if (await hasPartition(db, p)) await stateKeysTable.build(db, p);
  }
}

async function hasPartition(db: Db, partition: number): Promise<boolean> {
  const prefix = partitionPrefix(partition);
  const first = await db.keys({ gte: prefix, lt: `${prefix}~`, limit: 1 }).all();
  return first.length > 0;
}
