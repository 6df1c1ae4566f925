// The embedded log keeps the newest `retained_records` records per partition: what falls out of
// the window is deleted in the background, a chunk at a time (a quarter of the window, at most
// TRIM_CHUNK_RECORDS), never by the appends' own batches; a log opened with more than the window
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

t.test('what falls out of the window is trimmed after the appends, a chunk at a time', async (t) => {
  const db = await openWorkerStore(path.join(tempDir(t), 'w'));
  t.teardown(() => db.close());
  const writer = new GroupWriter(db);
  const log = await EmbeddedLog.open(db, 3, writer, 5); // a chunk of 1: every append trims
  let n = 0;
  for (const size of [1, 3, 2, 7, 1]) await log.append(Array.from({ length: size }, () => record(++n)), [], false);
  t.equal(log.applied_position, 14);
  await eventually(async () => (await log.first_position()) === 10);
  t.same(await positions(log), [10, 11, 12, 13, 14], 'the newest 5 are kept');
  await t.rejects(verifyPartition(db, 3), /trimmed before position 10/, 'a trimmed log is not called equal');

  const chunked = await EmbeddedLog.open(db, 5, writer, 40); // a chunk of 10
  const appendUpTo = async (last) => {
    while (chunked.applied_position < last) await chunked.append([record(chunked.applied_position + 1)], [], false);
  };
  await appendUpTo(49);
  t.equal(await chunked.first_position(), 1, '9 records past the window: less than a chunk, nothing trimmed');
  await appendUpTo(50);
  await eventually(async () => (await chunked.first_position()) === 11);
  await appendUpTo(59);
  t.equal(await chunked.first_position(), 11, 'the window and fewer than a chunk more');
  t.equal((await positions(chunked)).length, 49);
  await appendUpTo(60);
  await eventually(async () => (await chunked.first_position()) === 21);
  t.same(await positions(chunked), Array.from({ length: 40 }, (_, i) => 21 + i), 'the newest 40 again');

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
  const windowed = await EmbeddedLog.open(db, 0, writer, 8); // a chunk of 2
  await eventually(async () => (await windowed.first_position()) === 43);
  t.same(await positions(windowed), [43, 44, 45, 46, 47, 48, 49, 50]);
  await windowed.append([record(51)], [], false);
  await windowed.append([record(52)], [], false);
  await eventually(async () => (await windowed.first_position()) === 45);
  t.same((await positions(windowed)).slice(0, 2), [45, 46], 'and keeps trimming as it appends');
});


t.test('a trim that fails is tried again, from where the last one ended, at a later append', async (t) => {
  const db = await openWorkerStore(path.join(tempDir(t), 'w'));
  t.teardown(() => db.close());
  const writer = new GroupWriter(db);
  const log = await EmbeddedLog.open(db, 2, writer, 8); // a chunk of 2
  const clear = db.clear.bind(db);
  let failures = 1;
  db.clear = (range) => (failures-- > 0 ? Promise.reject(new Error('store closing')) : clear(range));
  for (let i = 1; i <= 10; i++) await log.append([record(i)], [], false); // the trim at 10 fails
  t.equal(await log.first_position(), 1, 'nothing trimmed yet');
  await log.append([record(11)], [], false);
  await eventually(async () => (await log.first_position()) === 4);
  t.same(await positions(log), [4, 5, 6, 7, 8, 9, 10, 11], 'the window again, older records gone from the first');
});

t.test('a reopened log starts trimming where the last trim ended, not over the tombstones of all before', async (t) => {
  const { logTable } = await import('../dist/storage/tables/log.js');
  const db = await openWorkerStore(path.join(tempDir(t), 'w'));
  t.teardown(() => db.close());
  const writer = new GroupWriter(db);
  const log = await EmbeddedLog.open(db, 6, writer, 8); // a chunk of 2
  for (let i = 1; i <= 30; i++) await log.append([record(i)], [], false);
  await eventually(async () => Number((await db.get(logTable.trimmedKey(6)))?.toString()) === 22);
  const ranges = [];
  const clear = db.clear.bind(db);
  db.clear = (range) => (ranges.push(range), clear(range));
  const reopened = await EmbeddedLog.open(db, 6, writer, 8);
  await reopened.append([record(31)], [], false);
  await reopened.append([record(32)], [], false);
  await eventually(async () => (await reopened.first_position()) === 25);
  t.ok(ranges.length > 0 && ranges.every((r) => r.gte === logTable.recordKey(6, 23)), `the trim after the reopen starts at 23: ${JSON.stringify(ranges)}`);
  t.same(await positions(reopened), [25, 26, 27, 28, 29, 30, 31, 32]);
});
