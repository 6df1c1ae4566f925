// Brings a worker store of an older format version to the current one, in place, at open. Each
// step is idempotent: a crash part-way leaves the old version file, and the next open runs it again.
import type { Db } from './store.js';
import { fsmTable, type Counters } from './tables/fsm.js';
import { invocationsTable } from './tables/invocations.js';
import { liveTable } from './tables/live.js';
import { outboxTable } from './tables/outbox.js';
import { restartTable } from './tables/restart.js';
import { stateKeysTable } from './tables/state-keys.js';
import { timersTable } from './tables/timers.js';

/**
 * 2 → 3: each partition's `statekeys` index, built from its state table, and its timer count in
 * the counters.
 */
export async function upgradeWorkerStore(db: Db, from: number): Promise<void> {
  for await (const p of partitionsIn(db)) {
    if (from <= 2) {
      await stateKeysTable.build(db, p);
      const counters = await fsmTable.read(db, p);
      // Synced: LevelDB writes its log in order, so this puts the index before it on disk too.
      await db.put(fsmTable.key(p), fsmTable.encode({ ...counters, timers: await timersTable.count(db, p) }), { sync: true });
    }
    if (from <= 3) await countLive(db, p);
  }
}

/**
 * 3 → 4: the `restart` index (invocations that run or back off), the counts of unfinished
 * invocations by status and by subscription (from the `live` index) and of outbox entries. The
 * counters go last, synced.
 */
async function countLive(db: Db, partition: number): Promise<void> {
  const counters: Counters = { ...(await fsmTable.read(db, partition)), outbox: await outboxTable.count(db, partition), statuses: {}, subscriptions: {} };
  let batch = db.batch();
  for await (const id of liveTable.scan(db, partition)) {
    const raw = await db.get(invocationsTable.key(partition, id));
    if (raw === undefined) throw new Error(`partition ${partition}: ${id} is indexed as live but has no status`);
    const s = invocationsTable.decode(raw);
    counters.statuses[s.status] = (counters.statuses[s.status] ?? 0) + 1;
    if (s.invoked_by_subscription_id) counters.subscriptions[s.invoked_by_subscription_id] = (counters.subscriptions[s.invoked_by_subscription_id] ?? 0) + 1;
    if (s.status === 'running' || s.status === 'backing-off') batch.put(restartTable.key(partition, id), restartTable.value);
    if (batch.length >= 1000) {
      await batch.write();
      batch = db.batch();
    }
  }
  await batch.write();
  await db.put(fsmTable.key(partition), fsmTable.encode(counters), { sync: true });
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
