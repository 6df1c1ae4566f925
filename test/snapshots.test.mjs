// Snapshots of a partition (src/storage/snapshots.ts) on a real LevelDB store and a real
// directory: what is restored is what was there, only complete snapshots are listed, a damaged
// one is refused, and the names sort by the log offset they cover.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { tempDir } from './helpers/keel.mjs';
import { openWorkerStore } from '../dist/storage/store.js';
import { logTable } from '../dist/storage/tables/log.js';
import { DirectorySnapshotStore, snapshotPartition, restorePartition } from '../dist/storage/snapshots.js';

async function contents(db, prefix) {
  const out = [];
  for await (const [k, v] of db.iterator({ gte: prefix, lt: `${prefix}~` })) out.push([k, v.toString('hex')]);
  return out;
}

t.test('a snapshot restores every key of its partition and nothing of the others', async (t) => {
  const dir = tempDir(t);
  const db = await openWorkerStore(path.join(dir, 'a'));
  t.teardown(() => db.close());
  const batch = db.batch();
  for (let i = 0; i < 5_000; i++) batch.put(`p1/s/state/k${i}`, Buffer.from(`value ${i}`));
  batch.put('p1/s/state/big', Buffer.alloc(3_000_000, 7)); // larger than any read chunk
  batch.put('p1/s/state/empty', Buffer.alloc(0));
  batch.put('p1/s/state/ünïcode ✓', Buffer.from([0, 1, 2]));
  batch.put(logTable.cursorKey(1), logTable.encodeCursor({ offset: 812, epoch: 3, position: 790 }));
  batch.put(logTable.appliedKey(1), logTable.encodeApplied(790));
  batch.put('p10/s/state/other', Buffer.from('partition 10'));
  batch.put('p0/s/state/other', Buffer.from('partition 0'));
  await batch.write();
  const store = new DirectorySnapshotStore(path.join(dir, 'snapshots'));

  t.equal(await snapshotPartition(db, 2, store), undefined, 'a partition that applied nothing has no snapshot');
  const taken = await snapshotPartition(db, 1, store);
  t.same(taken.cursor, { offset: 812, epoch: 3, position: 790 }, 'the snapshot covers the cursor it holds');
  t.ok(taken.bytes > 0 && taken.bytes < 200_000, `compressed: ${taken.bytes} bytes`);
  const expected = await contents(db, 'p1/');

  const other = await openWorkerStore(path.join(dir, 'b'));
  t.teardown(() => other.close());
  await other.put('p1/s/state/stale', Buffer.from('from an older copy'));
  await other.put('p10/s/state/kept', Buffer.from('another partition'));
  const { keys } = await restorePartition(other, taken, store);
  t.equal(keys, expected.length);
  t.same(await contents(other, 'p1/'), expected, 'the partition is exactly the snapshot (the stale key is gone)');
  t.same(await contents(other, 'p10/'), [['p10/s/state/kept', Buffer.from('another partition').toString('hex')]], 'p10/ is another partition: untouched');
});

t.test('snapshots list oldest first by log offset; writes in progress and damaged files are not taken', async (t) => {
  const dir = tempDir(t);
  const db = await openWorkerStore(path.join(dir, 'a'));
  t.teardown(() => db.close());
  const store = new DirectorySnapshotStore(path.join(dir, 'snapshots'));
  for (const [offset, position] of [[9, 8], [100, 95], [1_000_000_000_000, 999]]) {
    await db.put('p0/s/state/x', Buffer.from(String(position)));
    await db.put(logTable.cursorKey(0), logTable.encodeCursor({ offset, epoch: 1, position }));
    await snapshotPartition(db, 0, store);
  }
  fs.writeFileSync(path.join(dir, 'snapshots', 'p0', '.writing-1-2.tmp'), 'half a snapshot');
  fs.writeFileSync(path.join(dir, 'snapshots', 'p0', '.writing-3-4.tmp'), 'a write left by a node killed two hours ago');
  const twoHoursAgo = new Date(Date.now() - 7_200_000);
  fs.utimesSync(path.join(dir, 'snapshots', 'p0', '.writing-3-4.tmp'), twoHoursAgo, twoHoursAgo);
  t.equal(await store.removeUnfinished(0, 3_600_000), 1, 'an unfinished write over an hour old is removed');
  t.ok(fs.existsSync(path.join(dir, 'snapshots', 'p0', '.writing-1-2.tmp')), 'a recent one (a write in progress) stays');
  const listed = await store.list(0);
  t.same(listed.map((s) => s.cursor.offset), [9, 100, 1_000_000_000_000], 'by offset, not by name length');

  // A snapshot cut short (a disk that lost its tail) fails to read: gzip's trailer checks it.
  const damaged = path.join(dir, 'snapshots', 'p0', listed[1].name);
  const whole = fs.readFileSync(damaged);
  fs.writeFileSync(damaged, whole.subarray(0, whole.length - 6));
  await t.rejects(restorePartition(db, listed[1], store), 'a truncated snapshot is refused');
  t.equal(await logTable.readCursor(db, 0), undefined, 'and leaves no cursor behind: the next open restores again');
  await store.delete(listed[0]);
  t.same((await store.list(0)).map((s) => s.cursor.offset), [100, 1_000_000_000_000]);
});
