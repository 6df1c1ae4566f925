import { decodeCommand } from '../log/commands.js';
import { EmbeddedLog, type PartitionLog } from '../log/partition-log.js';
import { statePrefix } from '../storage/keys.js';
import type { Db } from '../storage/store.js';
import { outboxTable } from '../storage/tables/outbox.js';
import { fold } from './fold/index.js';
import { PartitionState } from './state.js';

/**
 * Folds a partition's whole log into fresh state and compares every state key with the
 * store. Returns the keys that differ (empty when the materialised state is exactly the fold).
 * Throws when the log no longer starts at position 1. `state_cache_bytes`: the object state the
 * rebuild keeps in memory (a tiny one reads every object back from what it rebuilt). `log`: the
 * partition's log where it is not the embedded one (a Kafka topic).
 */
export async function verifyPartition(db: Db, partition: number, state_cache_bytes?: number, log?: PartitionLog): Promise<string[]> {
  log ??= await EmbeddedLog.open(db, partition);
  const first = await log.first_position();
  // A rebuild needs every record: a trimmed log cannot be checked (and saying "equal" would lie).
  if (first > 1) throw new Error(`partition ${partition}: the log is trimmed before position ${first} (worker.storage_db.log_retained_records); it cannot be rebuilt from position 1`);
  const fresh = new PartitionState(partition, state_cache_bytes);
  const rebuilt = new Map<string, Buffer>();
  fresh.loader = (key) => rebuilt.get(key);
  for await (const [, record] of log.read(1)) {
    const cmd = decodeCommand(record);
    fold({ state: fresh, actions: [], now_ms: cmd.timestamp_ms ?? 0 }, cmd);
    for (const [key, value] of fresh.takeWrites()) {
      if (value === null) rebuilt.delete(key);
      else rebuilt.set(key, value);
    }
  }
  const differing: string[] = [];
  const prefix = statePrefix(partition);
  const seen = new Set<string>();
  for await (const [key, value] of db.iterator({ gte: prefix, lt: `${prefix}~` })) {
    seen.add(key);
    const expected = rebuilt.get(key);
    // (An outbox entry a format 5 server wrote is JSON; the rebuild writes it binary.)
    if (expected === undefined || !outboxTable.same(partition, key, expected, value)) differing.push(key);
  }
  for (const key of rebuilt.keys()) if (!seen.has(key)) differing.push(key);
  return differing;
}
