// Storage faults: a corrupt store file and a truncated write-ahead log at startup, a full disk
// and a data directory made read-only while serving (on a size-limited tmpfs mounted for the
// test), and a store whose writes fail (a wrapper, in-process). Keel refuses to start or stops
// the partition with a coded error, and never acknowledges what it did not write.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, query, eventually, tempDir } from './helpers/keel.mjs';
import { openWorkerStore } from '../dist/storage/store.js';
import { GroupWriter } from '../dist/storage/group-writer.js';
import { PartitionProcessor } from '../dist/partition/processor.js';
import { verifyPartition } from '../dist/partition/verify.js';
import { EmbeddedLog } from '../dist/log/partition-log.js';
import { InvocationId, randomPartitionKey } from '../dist/common/ids.js';
import { silentLogger } from '../dist/common/logger.js';

const echo = restate.service({ name: 'Echo', handlers: { len: async (_ctx, s) => (typeof s === 'string' ? s.length : 0) } });

async function startFails(t, opts) {
  const err = await startKeel(t, opts).then(() => undefined, (e) => e);
  t.ok(err, 'Keel refused to start');
  return err?.message ?? '';
}

/** Fills the worker store with a few completed invocations, then stops Keel cleanly. */
async function populated(t) {
  const dir = tempDir(t);
  const keel = await startKeel(t, { dir, env: { KEEL_WORKER__PARTITIONS: '2' } });
  await register(keel, await serveServices(t, [echo]));
  for (let i = 0; i < 20; i++) await ingress(keel, '/Echo/len', 'x'.repeat(i));
  await keel.stop();
  return { dir, db: path.join(dir, 'data', 'worker', 'db') };
}

t.test('a corrupt store file: Keel refuses to start with KEEL0015, naming the store', async (t) => {
  const { dir, db } = await populated(t);
  for (const f of fs.readdirSync(db).filter((f) => /\.(ldb|log)$/.test(f) || f.startsWith('MANIFEST'))) {
    const p = path.join(db, f);
    const bytes = fs.readFileSync(p);
    for (let i = 0; i < bytes.length; i += 7) bytes[i] ^= 0x5a;
    fs.writeFileSync(p, bytes);
  }
  const out = await startFails(t, { dir, env: { KEEL_WORKER__PARTITIONS: '2' } });
  t.match(out, /KEEL0015|KEEL0014/, 'a coded refusal');
  t.match(out, /worker/, 'it names the store');
  t.notMatch(out, /^\s+at /m, 'no stack trace: the error is explained, not thrown');
});

t.test('a truncated write-ahead log: either refused with a code, or the store still rebuilds from its log', async (t) => {
  const { dir, db } = await populated(t);
  const logs = fs.readdirSync(db).filter((f) => f.endsWith('.log'));
  t.ok(logs.length > 0, 'the store has a write-ahead log');
  for (const f of logs) {
    const p = path.join(db, f);
    fs.truncateSync(p, Math.floor(fs.statSync(p).size / 2));
  }
  const started = await startKeel(t, { dir, env: { KEEL_WORKER__PARTITIONS: '2' } }).then((k) => k, (e) => e);
  if (started instanceof Error) {
    t.match(started.message, /KEEL001[45]/, 'a coded refusal');
    return;
  }
  t.equal((await fetch(`${started.admin}/health`)).status, 200, 'started on what the log kept');
  await started.stop();
  const store = await openWorkerStore(path.join(dir, 'data', 'worker'));
  t.teardown(() => store.close());
  for (const p of [0, 1]) t.same(await verifyPartition(store, p), [], `partition ${p} is still the fold of its log`);
});

t.test('a store whose writes fail: the partition stops, nothing is acknowledged that was not written', async (t) => {
  const db = await openWorkerStore(path.join(tempDir(t), 'worker'));
  t.teardown(() => db.close());
  const writes = failingWrites(db);
  const p = await PartitionProcessor.open(db, new GroupWriter(db), 0, { fsync: true, effects: { execute() {} }, logger: silentLogger });
  const invoke = () => ({ kind: 'invoke', invoke: { invocation_id: InvocationId.random(randomPartitionKey()).bytes, service: 'S', handler: 'h', service_type: 'Service' } });
  const acknowledged = [];
  for (let i = 0; i < 5; i++) {
    const cmd = invoke();
    await p.append(cmd);
    acknowledged.push(InvocationId.fromBytes(cmd.invoke.invocation_id).text);
  }
  writes.failing = true;
  const refused = await Promise.allSettled([p.append(invoke()), p.append(invoke())]);
  t.same(refused.map((r) => r.status), ['rejected', 'rejected'], 'appends during the fault are refused');
  t.match(refused[0].reason, { code: 'KEEL0503', status: 503 });
  t.match(p.health, { reason: /could not be written.*No space left/ }, 'the partition says why it stopped');
  writes.failing = false;
  await t.rejects(p.append(invoke()), { code: 'KEEL0503' }, 'and stays stopped until a restart');
  t.equal((await EmbeddedLog.open(db, 0)).applied_position, 5, 'the log holds exactly what was acknowledged');
  t.same(await verifyPartition(db, 0), []);
  const again = await PartitionProcessor.open(db, new GroupWriter(db), 0, { fsync: true, effects: { execute() {} }, logger: silentLogger });
  t.same(acknowledged.filter((id) => again.invocation(id) === undefined), [], 'every acknowledged invocation is there after a restart');
});

t.test('a partition stopped by a failed write starts no attempt from what that batch folded', async (t) => {
  const db = await openWorkerStore(path.join(tempDir(t), 'worker'));
  t.teardown(() => db.close());
  const writes = failingWrites(db);
  const p = await PartitionProcessor.open(db, new GroupWriter(db), 0, { fsync: true, effects: { execute() {} }, logger: silentLogger });
  t.notOk(p.retired);
  writes.failing = true;
  const cmd = { kind: 'invoke', invoke: { invocation_id: InvocationId.random(randomPartitionKey()).bytes, service: 'S', handler: 'h', service_type: 'Service' } };
  await t.rejects(p.append(cmd), { code: 'KEEL0503' });
  const id = InvocationId.fromBytes(cmd.invoke.invocation_id).text;
  t.equal(p.invocation(id)?.status, 'running', 'its memory still holds the invocation the failed batch folded');
  t.ok(p.retired, 'a stopped partition is retired');
  // An attempt the invoker had parked (or queued) before the stop reaches launch only now.
  const { Invoker } = await import('../dist/invoker/index.js');
  const config = {
    worker: { partitions: 1, invoker: { concurrent_invocations_limit: 10, inactivity_timeout_ms: 60_000, abort_timeout_ms: 60_000, message_size_limit_bytes: 1e9, disable_eager_state: false } },
    default_retry_policy: { initial_interval_ms: 50, max_interval_ms: 100, max_attempts: 10, exponentiation_factor: 2, on_max_attempts: 'pause' },
  };
  const service = { name: 'S', ty: 'Service', deployment_id: 'D1', handlers: [{ name: 'h' }] };
  const registry = {
    deployment: () => ({ id: 'D1', uri: 'http://127.0.0.1:9', use_http_11: false, additional_headers: {}, min_protocol_version: 5, max_protocol_version: 5 }),
    deploymentConcurrency: () => undefined,
    service: () => service,
    handler: () => ({ service, handler: { name: 'h' } }),
  };
  let opened = 0;
  const invoker = new Invoker(config, registry, { openStream: () => (opened++, { write() {}, end() {}, finish() {}, abort() {} }) }, silentLogger);
  invoker.start(p, id, 0);
  t.equal(opened, 0, 'no attempt opens a stream for an invocation that was never written');
  invoker.stop();
});

/** Makes `db`'s batch writes fail (ENOSPC) while the returned switch's `failing` is set. */
function failingWrites(db) {
  const store = { failing: false };
  const batch = db.batch.bind(db);
  db.batch = (...args) => {
    const b = batch(...args);
    const write = b.write.bind(b);
    b.write = (...w) => (store.failing ? Promise.reject(Object.assign(new Error('No space left on device'), { code: 'ENOSPC' })) : write(...w));
    return b;
  };
  return store;
}

/**
 * Mounts a tmpfs of `size` at a new directory (the tests run as root, as CI does). Where the
 * machine forbids mounts, undefined: the in-process write-failure test above covers the path.
 */
function mountTmpfs(t, size) {
  const dir = tempDir(t, 'keel-mnt-');
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (err) {
    t.match(String(err.stderr ?? err.message), /permission|not permitted|only root|must be superuser/i, 'only a forbidden mount is tolerated');
    return undefined;
  }
  t.teardown(() => {
    try {
      execFileSync('umount', ['-l', dir]);
    } catch {}
  });
  return dir;
}

async function sendUntilRefused(keel, body, max) {
  const acknowledged = [];
  const refusals = [];
  for (let i = 0; i < max && refusals.length < 3; i++) {
    const r = await ingress(keel, '/Echo/len/send', body);
    if (r.status === 202) acknowledged.push(r.body.invocationId);
    else refusals.push(r);
  }
  return { acknowledged, refusals };
}

t.test('a full disk and a read-only data directory: coded refusals, acknowledged work survives', async (t) => {
  const mnt = mountTmpfs(t, '24m');
  if (mnt === undefined) return t.comment('this machine forbids mounts: the full-disk and read-only cases ran in-process only');
  const env = { KEEL_WORKER__PARTITIONS: '2', KEEL_BASE_DIR: path.join(mnt, 'data') };
  const keel = await startKeel(t, { dir: mnt, env });
  await register(keel, await serveServices(t, [echo]));

  // Full disk: 200 KB inputs (random, so that the store cannot compress them) until writes fail.
  const { acknowledged, refusals } = await sendUntilRefused(keel, randomBytes(150_000).toString('base64'), 400);
  t.ok(acknowledged.length > 10, `${acknowledged.length} sends acknowledged before the disk filled`);
  t.ok(refusals.length > 0, 'then sends are refused');
  for (const r of refusals) {
    t.ok(r.status >= 400 && r.status !== 500, `refused with ${r.status}, not 500`);
    t.match(r.body?.restate_code ?? '', /^KEEL05\d\d$/, `with a code: ${JSON.stringify(r.body).slice(0, 160)}`);
  }
  const health = await fetch(`${keel.admin}/health`);
  t.equal(health.status, 503, 'health says a partition stopped');
  t.match((await health.json()).restate_code, 'KEEL0503');
  t.equal(keel.proc.exitCode, null, 'the process did not crash');

  // Room again: after a restart every acknowledged send is there and completes.
  await keel.kill('SIGKILL');
  execFileSync('mount', ['-o', 'remount,size=128m', mnt]);
  await keel.launch();
  await eventually(async () => {
    const rows = await query(keel, "SELECT id FROM sys_invocation WHERE target_service_name = 'Echo' AND status = 'completed'");
    const done = new Set(rows.map((r) => r.id));
    return acknowledged.every((id) => done.has(id));
  }, { timeout_ms: 30_000 });
  t.pass('every acknowledged send completed after the restart');

  // Read-only (a file system cannot go read-only under open files, so at the next start): Keel
  // refuses to start with a coded error instead of running without its store.
  await keel.kill('SIGKILL');
  // The query engine process leaves on its own once its parent is gone (IPC disconnect); until
  // it has, its files keep the mount busy.
  for (let tries = 0; ; tries++) {
    try {
      execFileSync('mount', ['-o', 'remount,ro', mnt], { stdio: 'pipe' });
      break;
    } catch (err) {
      if (tries >= 100) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const refused = await startKeel(t, { dir: tempDir(t), env }).then(() => undefined, (e) => e);
  t.ok(refused, 'Keel refused to start on a read-only data directory');
  t.match(refused?.message ?? '', /KEEL001[45]|RT0005|META/, 'with a code');
  t.match(refused?.message ?? '', /read-only|EROFS/i, 'and says why');
  t.notMatch(refused?.message ?? '', /^\s+at /m, 'no stack trace');
  execFileSync('mount', ['-o', 'remount,rw', mnt]);
  await keel.launch();
  const rows = await query(keel, "SELECT id FROM sys_invocation WHERE target_service_name = 'Echo'");
  const ids = new Set(rows.map((r) => r.id));
  t.same(acknowledged.filter((id) => !ids.has(id)), [], 'nothing acknowledged was lost');
});
