// POST /services/{svc}/state on a real Keel (the ModifyState log command): the new state replaces
// the old one and handlers see it; a stale `version` changes nothing; a key held by a running
// invocation is refused with 409; the real `restate state patch|clear` work against it.
import t from 'tap';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as restate from '@restatedev/restate-sdk';
import { openWorkerStore } from '../dist/storage/store.js';
import { verifyPartition } from '../dist/partition/verify.js';
import { stateVersion } from '../dist/admin/introspection.js';
import { adminCall, eventually, ingress, query, register, serveServices, startKeel, tempDir } from './helpers/keel.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLI = path.join(here, '..', 'node_modules', '.bin', 'restate');

let release;
const Box = restate.object({
  name: 'Box',
  handlers: {
    put: async (ctx, v) => {
      ctx.set('v', v);
      return v;
    },
    all: restate.handlers.object.shared(async (ctx) => {
      const out = {};
      for (const k of (await ctx.stateKeys()).sort()) out[k] = await ctx.get(k);
      return out;
    }),
    // Holds the key's lock until the test lets it go.
    hold: async (ctx) => {
      await ctx.run('wait', () => new Promise((r) => (release = r)));
      return 'released';
    },
  },
});

const bytes = (v) => [...Buffer.from(JSON.stringify(v))];

async function stateOf(keel, key) {
  const rows = await query(keel, `SELECT key, value_utf8 FROM state WHERE service_name = 'Box' AND service_key = '${key}' ORDER BY key`);
  return Object.fromEntries(rows.map((r) => [r.key, r.value_utf8]));
}

t.test('state modification on a real Keel', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [Box]));
  t.equal((await ingress(keel, '/Box/b1/put', 1)).body, 1);

  const set = await adminCall(keel, 'POST', '/services/Box/state', { object_key: 'b1', new_state: { v: bytes(2), w: bytes('x') } });
  t.equal(set.status, 202, set.text);
  t.same(await stateOf(keel, 'b1'), { v: '2', w: '"x"' });
  t.same((await ingress(keel, '/Box/b1/all', null)).body, { v: 2, w: 'x' }, 'the handler sees the new state');

  const stale = await adminCall(keel, 'POST', '/services/Box/state', { object_key: 'b1', new_state: {}, version: 'not-the-version' });
  t.equal(stale.status, 202, 'a stale version is answered 202, as Restate does');
  t.same(await stateOf(keel, 'b1'), { v: '2', w: '"x"' }, 'and changes nothing');

  // An invocation holds b2: refused, nothing changed.
  const held = await ingress(keel, '/Box/b2/hold/send', null);
  await eventually(async () => (await query(keel, "SELECT invocation_id FROM sys_keyed_service_status WHERE service_key = 'b2'")).length === 1 && release);
  const locked = await adminCall(keel, 'POST', '/services/Box/state', { object_key: 'b2', new_state: { v: bytes(9) } });
  t.equal(locked.status, 409, locked.text);
  t.match(locked.json.message, held.body.invocationId);
  t.same(await stateOf(keel, 'b2'), {});
  release('go');
  await eventually(async () => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${held.body.invocationId}'`))[0]?.status === 'completed');
  t.equal((await adminCall(keel, 'POST', '/services/Box/state', { object_key: 'b2', new_state: { v: bytes(9) } })).status, 202);
  t.same(await stateOf(keel, 'b2'), { v: '9' }, 'once the key is free the change applies');

  // The state survives a restart (it is in the log and the store, not only in memory).
  await keel.restart();
  t.same(await stateOf(keel, 'b1'), { v: '2', w: '"x"' });

  // The real CLI: patch computes the version over the state it read; clear sends an empty state.
  const home = tempDir(t, 'keel-cli-home-');
  const cli = (...args) =>
    new Promise((resolve) => {
      execFile(
        CLI,
        args,
        { env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: keel.admin, RESTATE_CLI_CONFIG_HOME: home, NO_COLOR: '1', TERM: 'dumb' }, timeout: 60_000 },
        (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) }),
      );
    });
  const patch = await cli('state', 'patch', 'Box', 'b1', '--patch', '[{"op":"replace","path":"/v","value":3}]', '--yes');
  t.equal(patch.code, 0, patch.out);
  t.same(await stateOf(keel, 'b1'), { v: '3', w: '"x"' }, 'restate state patch');
  const clear = await cli('state', 'clear', 'Box/b1', '--yes');
  t.equal(clear.code, 0, clear.out);
  t.same(await stateOf(keel, 'b1'), {}, 'restate state clear');

  // The fold of ModifyState is deterministic: folding the logs again gives the stored state.
  await keel.stop();
  const db = await openWorkerStore(path.join(keel.dir, 'data', 'worker'));
  t.teardown(() => db.close());
  for (let p = 0; p < 8; p++) t.same(await verifyPartition(db, p), [], `partition ${p} rebuilds to the stored state`);
});

const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, d) => {
      const v = ((await ctx.get('count')) ?? 0) + d;
      ctx.set('count', v);
      return v;
    },
    all: restate.handlers.object.shared(async (ctx) => {
      const out = {};
      for (const k of (await ctx.stateKeys()).sort()) out[k] = await ctx.get(k);
      return out;
    }),
  },
});

async function counterState(keel, key) {
  const rows = await query(keel, `SELECT key, value FROM state WHERE service_name = 'Counter' AND service_key = '${key}' ORDER BY key`);
  return rows.map((r) => [r.key, Buffer.from(r.value, 'hex')]);
}

t.test('the new state replaces the old one, durably, and handlers see it', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [counter]));
  t.equal((await ingress(keel, '/Counter/c1/add', 5)).body, 5);
  const before = await counterState(keel, 'c1');
  t.same(before.map(([k, v]) => [k, v.toString()]), [['count', '5']]);

  const r = await adminCall(keel, 'POST', '/v4/services/Counter/state', {
    version: stateVersion(before),
    object_key: 'c1',
    new_state: { count: bytes(41), label: bytes('hi') },
  });
  t.equal(r.status, 202, r.text);
  t.same((await counterState(keel, 'c1')).map(([k, v]) => [k, v.toString()]), [['count', '41'], ['label', '"hi"']]);
  t.equal((await ingress(keel, '/Counter/c1/add', 1)).body, 42, 'the next invocation reads the new state');

  const stale = await adminCall(keel, 'POST', '/v4/services/Counter/state', { version: stateVersion(before), object_key: 'c1', new_state: {} });
  t.equal(stale.status, 202);
  t.same((await counterState(keel, 'c1')).map(([k]) => k), ['count', 'label'], 'a stale version changes nothing');

  const other = await counterState(keel, 'c2');
  t.equal((await adminCall(keel, 'POST', '/v4/services/Counter/state', { version: stateVersion(other), object_key: 'c2', new_state: { x: bytes(1) } })).status, 202);

  await keel.restart();
  t.same((await ingress(keel, '/Counter/c1/all', undefined)).body, { count: 42, label: 'hi' }, 'kept across a restart');
  t.same((await counterState(keel, 'c2')).map(([k, v]) => [k, v.toString()]), [['x', '1']]);

  // Clearing: an empty new state.
  const cur = await counterState(keel, 'c1');
  t.equal((await adminCall(keel, 'POST', '/v4/services/Counter/state', { version: stateVersion(cur), object_key: 'c1', new_state: {} })).status, 202);
  t.same(await counterState(keel, 'c1'), []);
});
