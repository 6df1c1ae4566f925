// Brings a worker store of an older format version to the current one, in place, at open. Each
// step is idempotent: a crash part-way leaves the old version file, and the next open runs it again.
import { assert } from '../common/assert.js';
import { idKeyText } from './keys.js';
import { entriesIn, type Db } from './store.js';
import { journalTable } from './tables/journal.js';
import { fsmTable, type Counters } from './tables/fsm.js';
import { invocationsTable } from './tables/invocations.js';
import { liveTable } from './tables/live.js';
import { outboxTable } from './tables/outbox.js';
import { restartTable } from './tables/restart.js';
import { stateKeysTable } from './tables/state-keys.js';
import { timersTable } from './tables/timers.js';

/**
 * 2 → 3: each partition's `statekeys` index, built from its state table, and its timer count in
 * the counters. 4 → 5 (below): the tables of invocations keyed uuid first. 5 → 6 rewrites
 * nothing: the outbox's JSON entries are read as they are until delivered (outboxTable.decode);
 * the version only keeps an older server, which cannot read the binary ones, off the store.
 */
export async function upgradeWorkerStore(db: Db, from: number): Promise<void> {
  for await (const p of partitionsIn(db)) {
    if (from <= 2) {
      await stateKeysTable.build(db, p);
      const counters = await fsmTable.read(db, p);
      // Synced: LevelDB writes its log in order, so this puts the index before it on disk too.
      await db.put(fsmTable.key(p), fsmTable.encode({ ...counters, timers: await timersTable.count(db, p) }), { sync: true });
    }
    // First: countLive reads the `live` index by format 5's keys.
    if (from <= 4) await rekeyIds(db, p);
    if (from <= 3) await countLive(db, p);
  }
}

/**
 * Format 4 keyed the tables of invocations by the id's text (`inv_1` + partition key + uuid);
 * format 5 by keys.ts's `idKeyText` (uuid first). `key` as format 5 has it: unchanged unless it
 * is a format 4 key of one of those tables. Snapshots written by format 4 go through it as they load.
 */
export function format5Key(key: string): string {
  const m = FORMAT_4_ID_KEY.exec(key);
  return m === null ? key : `${m[1]!}${idKeyText(m[2]!)}${m[3] ?? ''}`;
}
const FORMAT_4_ID_KEY = /^(p\d+\/s\/(?:inv|live|restart|j)\/)(inv_1[0-9a-zA-Z]{33})(\/.*)?$/s;

/** 4 → 5: every key of the four tables of invocations moved to its format 5 key, a batch at a time (each move one batch: idempotent). */
async function rekeyIds(db: Db, partition: number): Promise<void> {
  let batch = db.batch();
  for (const range of [invocationsTable, liveTable, restartTable, journalTable].map((t) => t.range(partition))) {
    for await (const [key, value] of entriesIn(db, { gte: `${range.gte}inv_1`, lt: `${range.gte}inv_1~` })) {
      const moved = format5Key(key);
      assert(moved !== key, () => `partition ${partition}: ${key} is not a format 4 key`);
      batch.del(key).put(moved, value);
      if (batch.length >= UPGRADE_BATCH_OPS) {
        await batch.write();
        batch = db.batch();
      }
    }
  }
  await batch.write({ sync: true });
}
const UPGRADE_BATCH_OPS = 2_000;

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
