// POST /services/{svc}/state on a real Keel: the operator's new state of one object key is a
// log command (set_object_state), applied in order, seen by the next invocation and kept
// across a restart; a stale version changes nothing (as Restate: still 202).
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { stateVersion } from '../dist/admin/introspection.js';
import { adminCall, ingress, query, register, serveServices, startKeel } from './helpers/keel.mjs';

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

const bytes = (v) => [...Buffer.from(JSON.stringify(v))];

async function stateOf(keel, key) {
  const rows = await query(keel, `SELECT key, value FROM state WHERE service_name = 'Counter' AND service_key = '${key}' ORDER BY key`);
  return rows.map((r) => [r.key, Buffer.from(r.value, 'hex')]);
}

t.test('the new state replaces the old one, durably, and handlers see it', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [counter]));
  t.equal((await ingress(keel, '/Counter/c1/add', 5)).body, 5);
  const before = await stateOf(keel, 'c1');
  t.same(before.map(([k, v]) => [k, v.toString()]), [['count', '5']]);

  const r = await adminCall(keel, 'POST', '/v4/services/Counter/state', {
    version: stateVersion(before),
    object_key: 'c1',
    new_state: { count: bytes(41), label: bytes('hi') },
  });
  t.equal(r.status, 202, r.text);
  t.same((await stateOf(keel, 'c1')).map(([k, v]) => [k, v.toString()]), [['count', '41'], ['label', '"hi"']]);
  t.equal((await ingress(keel, '/Counter/c1/add', 1)).body, 42, 'the next invocation reads the new state');

  const stale = await adminCall(keel, 'POST', '/v4/services/Counter/state', { version: stateVersion(before), object_key: 'c1', new_state: {} });
  t.equal(stale.status, 202);
  t.same((await stateOf(keel, 'c1')).map(([k]) => k), ['count', 'label'], 'a stale version changes nothing');

  const other = await stateOf(keel, 'c2');
  t.equal((await adminCall(keel, 'POST', '/v4/services/Counter/state', { version: stateVersion(other), object_key: 'c2', new_state: { x: bytes(1) } })).status, 202);

  await keel.restart();
  t.same((await ingress(keel, '/Counter/c1/all', undefined)).body, { count: 42, label: 'hi' }, 'kept across a restart');
  t.same((await stateOf(keel, 'c2')).map(([k, v]) => [k, v.toString()]), [['x', '1']]);

  // Clearing: an empty new state.
  const cur = await stateOf(keel, 'c1');
  t.equal((await adminCall(keel, 'POST', '/v4/services/Counter/state', { version: stateVersion(cur), object_key: 'c1', new_state: {} })).status, 202);
  t.same(await stateOf(keel, 'c1'), []);
});
