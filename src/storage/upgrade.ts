// Brings a worker store of an older format version to the current one, in place, at open. Each
// step is idempotent: a crash part-way leaves the old version file, and the next open runs it again.
import type { Db } from './store.js';
import { fsmTable } from './tables/fsm.js';
import { stateKeysTable } from './tables/state-keys.js';
import { timersTable } from './tables/timers.js';

/**
 * 2 → 3: each partition's `statekeys` index, built from its state table, and its timer count in
 * the counters.
 */
export async function upgradeWorkerStore(db: Db, from: number): Promise<void> {
  if (from > 2) return;
  for await (const p of partitionsIn(db)) {
    await stateKeysTable.build(db, p);
    const counters = await fsmTable.read(db, p);
    // Synced: LevelDB writes its log in order, so this puts the index before it on disk too.
    await db.put(fsmTable.key(p), fsmTable.encode({ ...counters, timers: await timersTable.count(db, p) }), { sync: true });
  }
}

/**
 * The partitions that hold keys, whatever their number: the first key from `p`, then a seek past
 * every key of its partition (`p<N>/~` sorts after them all: their next character is a table or
 * log name).
 */
async function* partitionsIn(db: Db): AsyncGenerator<number> {
  let from = 'p';
  for (;;) {
    const [key] = await db.keys({ gte: from, lt: 'q', limit: 1 }).all();
    if (key === undefined) return;
    const m = /^p(\d+)\//.exec(key);
    if (m === null) {
      from = `${key}\u0000`;
      continue;
    }
    yield Number(m[1]);
    from = `p${m[1]}/~`;
  }
}
