// The embedded log keeps the newest `retained_records` records per partition: each append deletes
// what falls out of the window in the same batch, and a log opened with more than the window
// loses its older records at once. The rebuild check refuses a trimmed log instead of passing it.
import t from 'tap';
import path from 'node:path';
import { openWorkerStore } from '../dist/storage/store.js';
import { GroupWriter } from '../dist/storage/group-writer.js';
import { EmbeddedLog } from '../dist/log/partition-log.js';
import { verifyPartition } from '../dist/partition/verify.js';
import { tempDir, eventually } from './helpers/keel.mjs';

const record = (n) => Buffer.from(`record ${n}`);
async function positions(log) {
  const out = [];
  for await (const [p, r] of log.read(1)) {
    if (r.toString() !== `record ${p}`) throw new Error(`position ${p} holds ${r}`);
    out.push(p);
  }
  return out;
}

t.test('appends trim what falls out of the window, in the same batch', async (t) => {
  const db = await openWorkerStore(path.join(tempDir(t), 'w'));
  t.teardown(() => db.close());
  const writer = new GroupWriter(db);
  const log = await EmbeddedLog.open(db, 3, writer, 5);
  let n = 0;
  for (const size of [1, 3, 2, 7, 1]) await log.append(Array.from({ length: size }, () => record(++n)), [], false);
  t.equal(log.applied_position, 14);
  t.same(await positions(log), [10, 11, 12, 13, 14], 'the newest 5 are kept');
  t.equal(await log.first_position(), 10);
  await t.rejects(verifyPartition(db, 3), /trimmed before position 10/, 'a trimmed log is not called equal');
  const other = await EmbeddedLog.open(db, 4, writer, 0);
  for (let i = 1; i <= 20; i++) await other.append([record(i)], [], false);
  t.equal((await positions(other)).length, 20, 'with 0 every record stays, and partitions are separate');
});

t.test('a log opened with a smaller window drops its older records', async (t) => {
  const db = await openWorkerStore(path.join(tempDir(t), 'w'));
  t.teardown(() => db.close());
  const writer = new GroupWriter(db);
  const all = await EmbeddedLog.open(db, 0, writer, 0);
  for (let i = 1; i <= 50; i++) await all.append([record(i)], [], false);
  const windowed = await EmbeddedLog.open(db, 0, writer, 8);
  await eventually(async () => (await windowed.first_position()) === 43);
  t.same(await positions(windowed), [43, 44, 45, 46, 47, 48, 49, 50]);
  await windowed.append([record(51)], [], false);
  t.same((await positions(windowed)).slice(0, 2), [44, 45], 'and keeps trimming as it appends');
});
