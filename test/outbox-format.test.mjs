// The outbox's stored encoding (worker format 6): binary entries written and read without a copy
// of the command, format 5's JSON entries still read (an upgraded store delivers what it held),
// and the rebuild check that does not mistake one encoding of an entry for another entry.
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { outboxTable } from '../dist/storage/tables/outbox.js';
import { logTable } from '../dist/storage/tables/log.js';
import { openWorkerStore, WORKER_FORMAT_VERSION } from '../dist/storage/store.js';
import { upgradeWorkerStore } from '../dist/storage/upgrade.js';
import { verifyPartition } from '../dist/partition/verify.js';
import { encodeCommand } from '../dist/log/commands.js';
import { partition, objectId, serviceId, objectInvoke, append, outboxEntries, MessageType, encode, pb } from './helpers/fold.mjs';

/** What a format 5 server stored for an entry. */
const jsonEntry = (target, command) => Buffer.from(JSON.stringify({ target, command: command.toString('base64') }));

const tmpdir = (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'keel-outbox-format-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
};

t.test('an entry is stored binary, its command read back as a view of the stored bytes', async (t) => {
  const target = serviceId().text;
  const command = Buffer.from([0x0a, 0x03, 0x01, 0x02, 0x03, 0xff, 0x00]);
  const value = outboxTable.encode({ seq: 7, target, command });
  t.equal(value[0], 0x01, 'the format byte');
  t.equal(value.length, 3 + target.length + command.length, 'no base64, no JSON');
  const key = outboxTable.key(4, 7);
  const entry = outboxTable.decode(4, key, value);
  t.same({ seq: entry.seq, target: entry.target }, { seq: 7, target });
  t.ok(entry.command.equals(command), 'the command as encoded');
  t.equal(entry.command.byteOffset, value.byteOffset + 3 + target.length, 'a view of the stored value at the command');
  value[value.length - 1] = 0x42;
  t.equal(entry.command.at(-1), 0x42, 'not a copy: a change to the stored bytes shows in it');
  t.ok(outboxTable.encode({ seq: 8, target, command: Buffer.alloc(0) }).equals(Buffer.concat([Buffer.from([1, 0, target.length]), Buffer.from(target)])), 'an empty command');

  t.throws(() => outboxTable.encode({ seq: 9, target: 'inv_é', command }), /not a short ASCII id/, 'a target that is not ASCII is refused');
  t.throws(() => outboxTable.encode({ seq: 9, target: 'x'.repeat(0x10000), command }), /not a short ASCII id/, 'nor one past a u16 length');
});

t.test("format 5's JSON entries are read as they are; corrupt ones are refused naming the entry", async (t) => {
  const target = serviceId().text;
  const command = Buffer.from('a command the fold encoded');
  const key = outboxTable.key(2, 41);
  const old = outboxTable.decode(2, key, jsonEntry(target, command));
  t.same({ seq: old.seq, target: old.target }, { seq: 41, target });
  t.ok(old.command.equals(command));

  const binary = outboxTable.encode({ seq: 41, target, command });
  t.ok(outboxTable.same(2, key, binary, jsonEntry(target, command)), 'the same entry in either encoding');
  t.notOk(outboxTable.same(2, key, binary, jsonEntry(target, Buffer.from('another command'))), 'another command differs');
  t.notOk(outboxTable.same(2, key, binary, jsonEntry(serviceId().text, command)), 'another target differs');
  t.notOk(outboxTable.same(2, key, binary, Buffer.from([0x01, 0x00])), 'a corrupt entry is not the same (and does not throw)');
  t.notOk(outboxTable.same(2, 'p2/s/inv/x', binary, jsonEntry(target, command)), 'only outbox keys are compared by content');

  t.throws(() => outboxTable.decode(2, key, Buffer.from([0x02, 0x00, 0x00])), /partition 2: corrupt outbox entry 41 \(first byte 2/);
  t.throws(() => outboxTable.decode(2, key, Buffer.from([0x01, 0x00])), /partition 2: corrupt outbox entry 41/, 'shorter than its header');
  t.throws(() => outboxTable.decode(2, key, Buffer.from([0x01, 0x00, 0x09, 0x41])), /partition 2: corrupt outbox entry 41 \(target of 9 bytes in 4\)/);
  t.throws(() => outboxTable.decode(2, key, Buffer.alloc(0)), /corrupt outbox entry 41/, 'an empty value');
});

t.test('a format 5 store is refused without the upgrade, opens through it as format 6, and its JSON entries are delivered', async (t) => {
  t.equal(WORKER_FORMAT_VERSION, 6);
  const dir = tmpdir(t);
  const target = serviceId().text;
  let db = await openWorkerStore(dir);
  await db.put(outboxTable.key(0, 1), jsonEntry(target, Buffer.from('first')));
  await db.put(outboxTable.key(0, 2), outboxTable.encode({ seq: 2, target, command: Buffer.from('second') }));
  await db.close();
  fs.writeFileSync(path.join(dir, 'KEEL_STORAGE_VERSION'), '5\n');
  await t.rejects(openWorkerStore(dir), /RT0009|format version '5'/, 'refused without the upgrade');
  db = await openWorkerStore(dir, { upgrade: upgradeWorkerStore });
  t.teardown(() => db.close());
  t.equal(fs.readFileSync(path.join(dir, 'KEEL_STORAGE_VERSION'), 'utf8').trim(), '6');
  t.equal((await db.get(outboxTable.key(0, 1)))[0], 0x7b, 'the JSON entry is left as it was (nothing rewritten)');
  const read = await outboxTable.read(db, 0, 1, 10);
  t.same(read.map((e) => [e.seq, e.target, e.command.toString()]), [[1, target, 'first'], [2, target, 'second']], 'both read, in order');
});

t.test('the rebuild check takes a JSON entry for the binary one the log folds to, and still reports a changed one', async (t) => {
  const p = partition(0);
  const records = [];
  const apply = (cmd) => {
    const at = p.now + 1;
    records.push(encodeCommand({ timestamp_ms: at, ...cmd }));
    return p.apply(cmd, at);
  };
  const id = objectId('Obj', 'k');
  apply(objectInvoke(id, 'k'));
  const call = encode(pb.Call, { service_name: 'Other', handler_name: 'h', parameter: Buffer.from('{}'), invocation_id_notification_idx: 1, result_completion_id: 2 });
  apply(append(id, 0, MessageType.CallCommand, call, { child_invocation_id: serviceId().bytes, child_service_type: 'Service' }));
  const [entry] = outboxEntries(p);
  t.ok(entry, 'the call waits in the outbox');

  const db = await openWorkerStore(tmpdir(t));
  t.teardown(() => db.close());
  const batch = db.batch();
  records.forEach((r, i) => batch.put(logTable.recordKey(0, i + 1), r));
  for (const [k, v] of p.store) batch.put(k, v);
  await batch.write();
  t.same(await verifyPartition(db, 0), [], 'the stored state is the fold of the log');

  const key = outboxTable.key(0, entry.seq);
  t.equal((await db.get(key))[0], 0x01, 'stored binary');
  await db.put(key, jsonEntry(entry.target, entry.command));
  t.same(await verifyPartition(db, 0), [], 'the same entry as a format 5 server wrote it');
  await db.put(key, jsonEntry(entry.target, Buffer.concat([entry.command, Buffer.from([0])])));
  t.same(await verifyPartition(db, 0), [key], 'a changed command is reported');
});
