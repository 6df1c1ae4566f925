// A fresh worker store in the test's temp dir, with a config of `partitions` partitions, and
// Workers on it (each stopped, and the store closed, when the test ends).
import path from 'node:path';
import { InvocationId } from '../../dist/common/ids.js';
import { loadConfig } from '../../dist/config/index.js';
import { silentLogger } from '../../dist/common/logger.js';
import { Worker } from '../../dist/partition/worker.js';
import { openWorkerStore } from '../../dist/storage/store.js';
import { tempDir } from './keel.mjs';

export async function workerStore(t, { partitions = 2 } = {}) {
  const dir = tempDir(t);
  const db = await openWorkerStore(path.join(dir, 'worker'));
  t.teardown(() => db.close());
  const config = loadConfig(undefined, { KEEL_WORKER__PARTITIONS: String(partitions), KEEL_BASE_DIR: dir });
  /** A Worker on the store, serving `owned` (default: every partition). */
  const worker = (owned) => {
    const w = new Worker(config, silentLogger, undefined, owned);
    t.teardown(() => w.stop());
    return w;
  };
  return { dir, db, config, worker };
}

/** An AttemptRunner that runs nothing: for Workers whose tests drive the commands themselves. */
export const NO_INVOKER = { start() {}, forward() {}, abort() {}, reject() {}, stop() {} };

/** A subscription_records command: one record per offset, each a new invocation in `pk`'s partition (made there when `local`). */
export function subscriptionRecords(offsets, pk, { local = false, sub = 'sub_1bbbbbbbbbbbbbbbbbbbbbb' } = {}) {
  return {
    kind: 'subscription_records',
    subscription_records: {
      subscription_id: sub,
      topic: 'orders',
      kafka_partition: 0,
      service: 'Svc',
      handler: 'h',
      service_type: 'Service',
      handler_type: '',
      records: offsets.map((offset) => ({ offset, invocation_id: InvocationId.random(pk).bytes, input: Buffer.from('1'), local })),
    },
  };
}
