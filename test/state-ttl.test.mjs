// State TTLs (Keel's own, P14): an object's state is cleared a TTL after its last write (or
// access), decided by the fold at the log's time, never under a held key; with a real SDK
// service, PATCH /services/{name}, SQL's `state.expires_at` and the cleaner across a SIGKILL.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { partition, objectId, objectInvoke, append, ended, output, MessageType, Outcome, encode, pb } from './helpers/fold.mjs';
import { startKeel, serveServices, register, ingress, adminCall, query, eventually } from './helpers/keel.mjs';

const HOUR = 3_600_000;
const book = (services) => ({ kind: 'state_ttls', state_ttls: { services } });
const expire = (objectKey) => ({ kind: 'expire_state', expire_state: { object_key: objectKey } });
const setState = (value) => encode(pb.SetState, { key: Buffer.from('v'), value: { content: Buffer.from(value) } });

/** One invocation on Obj/`key` at `at` (each command 1 ms later): writes `value` unless undefined; left running when `finish` is false. */
function call(p, key, at, { value, finish = true } = {}) {
  const id = objectId('Obj', key);
  p.apply(objectInvoke(id, key), at);
  if (value !== undefined) p.apply(append(id, 0, MessageType.SetStateCommand, setState(value)), at + 1);
  if (!finish) return id;
  p.apply(append(id, 0, MessageType.OutputCommand, output('ok')), at + 2);
  p.apply(ended(id, 0, Outcome.END), at + 3);
  return id;
}

const has = (p, key) => p.state.stateKeys(`Obj/${key}`).length > 0;
const tracked = (p) => [...p.store.keys()].filter((k) => k.includes('/s/sttl')).length;

t.test('fold: counted from the last write; kept until due, then cleared with its tracking', async (t) => {
  const p = partition();
  p.apply(book([{ service: 'Obj', ttl_ms: HOUR, on_access: false }]), 1_000_000);
  call(p, 'a', 1_001_000, { value: 'x' });
  t.equal(p.state.ttl.expiresAt('Obj', 'Obj/a'), 1_001_001 + HOUR, 'due an hour after the write (its log time)');
  call(p, 'a', 1_002_000); // reads nothing, writes nothing: not a write
  p.apply(expire('Obj/a'), 1_001_001 + HOUR - 1);
  t.ok(has(p, 'a'), 'not yet due: kept');
  p.apply(expire('Obj/a'), 1_001_001 + HOUR);
  t.notOk(has(p, 'a'), 'due: cleared');
  t.equal(tracked(p), 0, 'no tracking left');
});

t.test('fold: counted from the last access; a held key is never expired', async (t) => {
  const p = partition();
  p.apply(book([{ service: 'Obj', ttl_ms: HOUR, on_access: true }]), 1_000_000);
  call(p, 'b', 1_001_000, { value: 'x' });
  call(p, 'b', 1_001_000 + HOUR / 2); // an access: completes without writing
  p.apply(expire('Obj/b'), 1_001_004 + HOUR);
  t.ok(has(p, 'b'), 'accessed half an hour later: kept an hour after the write');
  const holder = call(p, 'b', 1_001_000 + 2 * HOUR, { finish: false });
  p.apply(expire('Obj/b'), 1_001_000 + 4 * HOUR);
  t.ok(has(p, 'b'), 'past due while an invocation holds the key: kept');
  p.apply(append(holder, 0, MessageType.OutputCommand, output('ok')), 1_001_000 + 4 * HOUR + 1);
  p.apply(ended(holder, 0, Outcome.END), 1_001_000 + 4 * HOUR + 2);
  p.apply(expire('Obj/b'), 1_001_000 + 5 * HOUR + 1);
  t.ok(has(p, 'b'), 'the holder\'s end was an access: due an hour after it');
  p.apply(expire('Obj/b'), 1_001_000 + 5 * HOUR + 2);
  t.notOk(has(p, 'b'), 'then cleared');
});

t.test('fold: state older than the TTL counts from when the TTL was set; a removed TTL expires nothing', async (t) => {
  const p = partition();
  call(p, 'c', 1_000_000, { value: 'x' });
  call(p, 'd', 1_000_100, { value: 'y' });
  p.apply(book([{ service: 'Obj', ttl_ms: HOUR, on_access: false }]), 2_000_000);
  t.equal(tracked(p), 0, 'setting a TTL writes nothing per object');
  p.apply(expire('Obj/c'), 2_000_000 + HOUR - 1);
  t.ok(has(p, 'c'), 'an hour after the TTL was set, not before');
  p.apply(book([{ service: 'Obj', ttl_ms: HOUR / 2, on_access: false }]), 2_000_000 + HOUR - 1);
  p.apply(expire('Obj/c'), 2_000_000 + HOUR);
  t.notOk(has(p, 'c'), 'a shorter TTL applies at once (it counts from when the service got one)');
  p.apply(book([]), 2_000_000 + HOUR + 1);
  p.apply(expire('Obj/d'), 2_000_000 + 3 * HOUR);
  t.ok(has(p, 'd'), 'no TTL any more: kept');
});

t.test('fold: an old object the sweep finds under a held key is indexed, and expired once its holder ends', async (t) => {
  const p = partition();
  call(p, 'e', 1_000_000, { value: 'x' });
  p.apply(book([{ service: 'Obj', ttl_ms: HOUR, on_access: false }]), 2_000_000);
  const holder = call(p, 'e', 2_000_000 + HOUR, { finish: false });
  p.apply(expire('Obj/e'), 2_000_000 + HOUR + 10);
  t.ok(has(p, 'e'), 'held: kept');
  t.equal(p.state.ttl.touchedAt('Obj/e'), 2_000_000, 'indexed at the TTL\'s start, for the next run to find');
  p.apply(append(holder, 0, MessageType.OutputCommand, output('ok')), 2_000_000 + HOUR + 20);
  p.apply(ended(holder, 0, Outcome.END), 2_000_000 + HOUR + 21);
  p.apply(expire('Obj/e'), 2_000_000 + HOUR + 30);
  t.notOk(has(p, 'e'), 'then cleared (the holder only read: not a write)');
  p.apply(book([{ service: 'Obj', ttl_ms: 2 ** 60, on_access: false }]), 2_000_000 + HOUR + 40);
  t.same(p.state.ttl.entries(), [], 'a TTL past what a number holds changes nothing (and stops nothing)');
});

t.test('the sweep reads the objects of one service, unscoped and scoped, each once across pages', async (t) => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const path = await import('node:path');
  const { openWorkerStore } = await import('../dist/storage/store.js');
  const { stateKeysTable } = await import('../dist/storage/tables/state-keys.js');
  const { objectKeyOf } = await import('../dist/storage/keys.js');
  const dir = mkdtempSync(path.join(tmpdir(), 'keel-sttl-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const db = await openWorkerStore(path.join(dir, 'worker'));
  t.teardown(() => db.close());
  const want = [];
  for (let i = 0; i < 7; i++) {
    for (const [svc, scope] of [['Obj', undefined], ['Obj', 's1'], ['Other', undefined], ['Other', 's1'], ['Obj~x', undefined], ['O', undefined]]) {
      const objectKey = objectKeyOf(svc, `k${i}`, scope);
      await db.put(stateKeysTable.key(3, objectKey), stateKeysTable.encode(['v']));
      if (svc === 'Obj') want.push(objectKey);
    }
  }
  await db.put(stateKeysTable.key(4, objectKeyOf('Obj', 'elsewhere')), stateKeysTable.encode(['v']));
  const seen = [];
  let cursor;
  for (let page = 0; page < 50; page++) {
    const { objectKeys, next } = await stateKeysTable.objectsOf(db, 3, 'Obj', cursor, 4);
    seen.push(...objectKeys);
    if (next === undefined) break;
    cursor = next;
  }
  t.same([...seen].sort(), [...want].sort(), 'every object of Obj in partition 3, once; none of Other, Obj~x, O or partition 4');
});

t.test('fold: a rebuild from the same commands ends with the same store, with a cache of one byte', async (t) => {
  const commands = [];
  const record = (p) => {
    const apply = p.apply.bind(p);
    p.apply = (cmd, at) => {
      commands.push([cmd, at]);
      return apply(cmd, at);
    };
    return p;
  };
  const p = record(partition());
  p.apply(book([{ service: 'Obj', ttl_ms: HOUR, on_access: true }]), 1_000_000);
  for (let i = 0; i < 20; i++) call(p, `k${i % 7}`, 1_000_100 + i * 600_000, { value: i % 3 === 0 ? undefined : `v${i}` });
  for (let i = 0; i < 7; i++) p.apply(expire(`Obj/k${i}`), 1_000_100 + 20 * 600_000 + i * 300_000);
  const again = partition(0, 1);
  for (const [cmd, at] of commands) again.apply(cmd, at);
  t.same([...again.store].sort(), [...p.store].sort(), 'same keys and values');
  t.ok([0, 1, 2, 3, 4, 5, 6].some((i) => !has(p, `k${i}`)) && [0, 1, 2, 3, 4, 5, 6].some((i) => has(p, `k${i}`)), 'some expired, some kept');
});

const Counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, delta) => {
      const n = ((await ctx.get('n')) ?? 0) + delta;
      ctx.set('n', n);
      return n;
    },
    get: restate.handlers.object.shared(async (ctx) => (await ctx.get('n')) ?? 0),
  },
});

t.test('server: PATCH state_ttl on a TS SDK object; SQL shows expires_at; expired across a SIGKILL; a refreshed key stays', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_WORKER__CLEANUP_INTERVAL: '200ms' } });
  await register(keel, await serveServices(t, [Counter]));
  t.equal((await ingress(keel, '/Counter/old/add', 5)).body, 5, 'state written before the TTL');

  const patched = await adminCall(keel, 'PATCH', '/services/Counter', { state_ttl: '3s', state_ttl_from: 'last_write' });
  t.equal(patched.status, 200, patched.text);
  t.same({ ttl: patched.json.state_ttl, from: patched.json.state_ttl_from }, { ttl: '3s', from: 'last_write' });
  const refused = await adminCall(keel, 'PATCH', '/services/Counter', { state_ttl: 'forever' });
  t.equal(refused.status, 400);
  t.match(refused.text, /KEEL0002.*state_ttl/);

  const before = Date.now();
  t.equal((await ingress(keel, '/Counter/a/add', 1)).body, 1);
  t.equal((await ingress(keel, '/Counter/b/add', 1)).body, 1);
  const rows = await eventually(async () => {
    const r = await query(keel, `SELECT service_key, expires_at FROM state WHERE service_name = 'Counter' ORDER BY service_key`);
    return r.length === 3 && r.every((x) => x.expires_at) ? r : undefined;
  });
  const due = Object.fromEntries(rows.map((r) => [r.service_key, Date.parse(r.expires_at)]));
  t.ok(due.a >= before + 3000 && due.a <= Date.now() + 3000, `a expires 3 s after its write (${rows[0].expires_at})`);

  await keel.restart(); // SIGKILL: the book and the times are in the store
  // b is written every 500 ms: never 3 s old.
  const keepB = setInterval(() => void ingress(keel, '/Counter/b/add', 1).catch(() => {}), 500);
  t.teardown(() => clearInterval(keepB));
  await eventually(async () => (await query(keel, `SELECT service_key FROM state WHERE service_name = 'Counter' AND service_key IN ('a', 'old')`)).length === 0, { timeout_ms: 20_000 });
  t.pass('a and the state from before the TTL are cleared');
  t.equal((await ingress(keel, '/Counter/a/get', null)).body, 0, 'the handler sees no state for a');
  clearInterval(keepB);
  const b = (await ingress(keel, '/Counter/b/get', null)).body;
  t.ok(b > 1, `b, written since, kept its state (${b})`);
  t.match(keel.output, /"state_expiries":[1-9]/, 'the cleaner logs what it expired');

  const removed = await adminCall(keel, 'PATCH', '/services/Counter', { state_ttl: '0' });
  t.equal(removed.status, 200);
  t.equal(removed.json.state_ttl, undefined, 'removed');
});
