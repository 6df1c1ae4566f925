// Virtual objects on a real Keel with real SDK services: per-key exclusivity and arrival order,
// parallel keys, shared handlers that never wait, state operations (eager and lazy), state that
// survives a SIGKILL, `pending` in sys_invocation, and the admin `state` table / `restate state get`.
import t from 'tap';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { counter } from './services/context-services.mjs';
import { listObj, lazyListObj, trace } from './services/object-services.mjs';
import { entered, release } from './services/gates.mjs';
import { query, statusOf, cli, request, restartKeel, within } from './services/context-helpers.mjs';

async function setup(t, env = {}) {
  const keel = await startKeel(t, { env });
  const uri = await serveServices(t, [listObj, lazyListObj, counter]);
  await register(keel, uri);
  return keel;
}

const stepsOf = (name, key) => trace.filter((r) => r.name === name && r.key === key);

t.test('exclusive handlers of one key: concurrent read-sleep-write appends lose nothing and never overlap', async (t) => {
  const keel = await setup(t);
  const items = ['a', 'b', 'c', 'd', 'e'];
  const results = await Promise.all(items.map((item) => ingress(keel, '/ListObj/k1/append', { item, ms: 100 })));
  for (const r of results) t.equal(r.status, 200, JSON.stringify(r.body));
  const final = await ingress(keel, '/ListObj/k1/items');
  t.equal(final.status, 200);
  t.same([...final.body].sort(), items, 'no update lost');
  // each call saw exactly the items of the calls before it: lengths 1..5, each a prefix of the final list
  t.same(results.map((r) => r.body.length).sort(), [1, 2, 3, 4, 5]);
  for (const r of results) t.same(r.body, final.body.slice(0, r.body.length));
  // executions did not overlap in time
  const steps = stepsOf('ListObj', 'k1');
  t.equal(steps.length, 10);
  for (let i = 0; i < steps.length; i += 2) {
    t.equal(steps[i].ev, 'start', `step ${i} starts`);
    t.equal(steps[i + 1].ev, 'end', `step ${i + 1} ends`);
    t.equal(steps[i].item, steps[i + 1].item, 'start and end of the same invocation are adjacent');
  }
  t.same(steps.filter((s) => s.ev === 'end').map((s) => s.item), final.body, 'state order = execution order');
});

t.test('sequential /send of one key: executed in arrival order', async (t) => {
  const keel = await setup(t);
  const items = ['s0', 's1', 's2', 's3', 's4'];
  for (const item of items) {
    const r = await ingress(keel, '/ListObj/k2/append/send', { item, ms: 50 });
    t.equal(r.status, 202);
    t.equal(r.body.status, 'Accepted');
  }
  const final = await eventually(async () => {
    const r = await ingress(keel, '/ListObj/k2/items');
    return r.body.length === items.length && r.body;
  });
  t.same(final, items, 'recorded order = arrival order');
  t.same(stepsOf('ListObj', 'k2').filter((s) => s.ev === 'start').map((s) => s.item), items);
});

t.test('different keys run in parallel', async (t) => {
  const keel = await setup(t);
  const [a, b] = await Promise.all([
    ingress(keel, '/ListObj/pa/append', { item: 'x', ms: 700 }),
    ingress(keel, '/ListObj/pb/append', { item: 'y', ms: 700 }),
  ]);
  t.equal(a.status, 200);
  t.equal(b.status, 200);
  const [sa, ea] = stepsOf('ListObj', 'pa');
  const [sb, eb] = stepsOf('ListObj', 'pb');
  t.ok(sa.at < eb.at && sb.at < ea.at, `the two keys overlapped in time (a ${sa.at}-${ea.at}, b ${sb.at}-${eb.at})`);
});

t.test('shared handlers run while an exclusive handler holds the key; a second exclusive one is pending', async (t) => {
  const keel = await setup(t);
  t.equal((await ingress(keel, '/ListObj/sh/setMany', { items: ['first'] })).status, 200);
  const hold = await ingress(keel, '/ListObj/sh/hold/send', 'gate-sh');
  t.equal(hold.status, 202);
  const holdId = hold.body.invocationId;
  await eventually(() => entered('gate-sh') === 1);
  const queued = await ingress(keel, '/ListObj/sh/append/send', { item: 'second', ms: 10 });
  t.equal(queued.status, 202);
  const queuedId = queued.body.invocationId;

  // the shared handler answers while the key is held and the exclusive one waits
  const shared = await within(3000, ingress(keel, '/ListObj/sh/items'), 'shared handler on a held key');
  t.equal(shared.status, 200);
  t.same(shared.body, ['first']);
  const snap = await within(3000, ingress(keel, '/ListObj/sh/snapshot'), 'shared handler on a held key');
  t.same(snap.body, { keys: ['items'], values: { items: ['first'] } });

  const rows = await eventually(async () => {
    const r = await query(keel, `SELECT id, status FROM sys_invocation WHERE id IN ('${holdId}', '${queuedId}')`);
    const st = Object.fromEntries(r.map((x) => [x.id, x.status]));
    return st[holdId] === 'running' && st[queuedId] === 'pending' && st;
  }).catch(() => undefined);
  t.ok(rows, 'the holder is running and the second exclusive invocation is pending');
  t.same(
    await query(keel, `SELECT id, status FROM sys_invocation WHERE status = 'pending'`),
    [{ id: queuedId, status: 'pending' }],
    'SELECT id, status FROM sys_invocation shows exactly the queued one as pending',
  );
  t.equal(stepsOf('ListObj', 'sh').length, 0, 'the queued append has not started');
  // a shared handler on the held key is not queued behind the pending exclusive one either
  t.same((await within(3000, ingress(keel, '/ListObj/sh/items'), 'shared handler behind a pending one')).body, ['first']);

  release('gate-sh');
  const final = await eventually(async () => {
    const r = await ingress(keel, '/ListObj/sh/items');
    return r.body.length === 2 && r.body;
  });
  t.same(final, ['first', 'second']);
  t.equal(await statusOf(keel, holdId), 'completed');
  await eventually(async () => (await statusOf(keel, queuedId)) === 'completed');
  const out = await request(keel, 'GET', `/restate/invocation/${holdId}/output`);
  t.equal(out.status, 200);
  t.equal(out.body, 'gate-sh:released');
});

for (const name of ['ListObj', 'LazyListObj']) {
  t.test(`${name}: get, set, clear, clearAll, stateKeys`, async (t) => {
    const keel = await setup(t);
    const base = `/${name}/st`;
    t.same((await ingress(keel, `${base}/snapshot`)).body, { keys: [], values: {} }, 'empty at first');
    t.equal((await ingress(keel, `${base}/setMany`, { a: 1, b: 'two', c: { x: [3] } })).status, 200);
    t.same((await ingress(keel, `${base}/snapshot`)).body, { keys: ['a', 'b', 'c'], values: { a: 1, b: 'two', c: { x: [3] } } });
    const ex = await ingress(keel, `${base}/snapshotExclusive`);
    t.same(ex.body, { keys: ['a', 'b', 'c'], values: { a: 1, b: 'two', c: { x: [3] } } });
    t.equal((await ingress(keel, `${base}/clearOne`, 'b')).status, 200);
    t.same((await ingress(keel, `${base}/snapshot`)).body, { keys: ['a', 'c'], values: { a: 1, c: { x: [3] } } });
    const rw = await ingress(keel, `${base}/setThenRead`, { k: 'a', v: 42 });
    t.same(rw.body, { before: 1, after: 42, cleared: null }, 'reads in one invocation see its own writes and clears');
    t.same((await ingress(keel, `${base}/snapshot`)).body, { keys: ['a', 'c'], values: { a: 42, c: { x: [3] } } });
    // other keys are untouched
    t.same((await ingress(keel, `/${name}/other/snapshot`)).body, { keys: [], values: {} });
    const cleared = await ingress(keel, `${base}/clearEverything`);
    t.same(cleared.body, { keys: [], values: {} }, 'clearAll is visible in the same invocation');
    t.same((await ingress(keel, `${base}/snapshot`)).body, { keys: [], values: {} }, 'and afterwards');

    // eager state: the SDK answers from the StartMessage (GetEagerState*); lazy: it asks (GetLazyState*)
    await ingress(keel, `${base}/setMany`, { z: 'zz' });
    const probe = await ingress(keel, `${base}/snapshotExclusive`);
    t.same(probe.body, { keys: ['z'], values: { z: 'zz' } });
    const id = probe.headers.get('x-restate-id');
    const types = (await query(keel, `SELECT entry_type FROM sys_journal WHERE id = '${id}' ORDER BY index`)).map((r) => r.entry_type);
    const kind = name === 'LazyListObj' ? 'Lazy' : 'Eager';
    t.ok(types.includes(`Command: Get${kind}StateKeys`), `${kind} keys command in ${JSON.stringify(types)}`);
    t.ok(types.includes(`Command: Get${kind}State`), `${kind} get command in ${JSON.stringify(types)}`);
  });
}

t.test('state survives a SIGKILL and restart of Keel (eager and lazy)', async (t) => {
  const keel = await setup(t);
  for (const name of ['ListObj', 'LazyListObj']) {
    t.equal((await ingress(keel, `/${name}/r1/setMany`, { n: 7, s: 'seven' })).status, 200);
    t.equal((await ingress(keel, `/${name}/r1/append`, { item: 'before', ms: 1 })).status, 200);
  }
  await restartKeel(keel);
  for (const name of ['ListObj', 'LazyListObj']) {
    const snap = await ingress(keel, `/${name}/r1/snapshotExclusive`);
    t.equal(snap.status, 200, JSON.stringify(snap.body));
    t.same(snap.body, { keys: ['items', 'n', 's'], values: { items: ['before'], n: 7, s: 'seven' } }, name);
    const more = await ingress(keel, `/${name}/r1/append`, { item: 'after', ms: 1 });
    t.same(more.body, ['before', 'after'], `${name}: read-modify-write continues from the persisted state`);
  }
});

t.test('admin state table and restate state get show an object key state', async (t) => {
  const keel = await setup(t);
  t.equal((await ingress(keel, '/Counter/c1/add', 5)).body, 5);
  t.equal((await ingress(keel, '/Counter/c1/add', 3)).body, 8);
  t.equal((await ingress(keel, '/Counter/c2/add', 1)).body, 1);
  const rows = await query(keel, "select key, value from state where service_name = 'Counter' and service_key = 'c1'");
  t.equal(rows.length, 1);
  t.equal(rows[0].key, 'count');
  t.equal(Buffer.from(rows[0].value, 'hex').toString(), '8', `value ${rows[0].value} is the hex of the JSON bytes`);
  const plain = await cli(t, keel, 'state', 'get', 'Counter', 'c1', '--plain');
  t.equal(plain.code, 0, plain.out);
  t.same(JSON.parse(plain.stdout), { count: 8 });
  const table = await cli(t, keel, 'state', 'get', 'Counter', 'c1');
  t.equal(table.code, 0, table.out);
  t.match(table.out, /count/);
  t.match(table.out, /8/);
});

t.test('the lock holder and the key inbox survive a SIGKILL: queued invocations still run in order', async (t) => {
  const keel = await setup(t);
  const first = await ingress(keel, '/ListObj/ri/append/send', { item: 'r0', ms: 2500 });
  t.equal(first.status, 202);
  await eventually(() => stepsOf('ListObj', 'ri').length === 1); // r0 is in its durable sleep
  for (const item of ['r1', 'r2']) t.equal((await ingress(keel, '/ListObj/ri/append/send', { item, ms: 1 })).status, 202);
  await eventually(async () => (await query(keel, "SELECT id FROM sys_invocation WHERE status = 'pending'")).length === 2);
  await restartKeel(keel);
  // (the first query after a start waits for the query engine's copy: r0, then r1 and r2 may be done by then)
  const all = await query(keel, "SELECT id, status FROM sys_invocation WHERE target_service_key = 'ri'");
  t.equal(all.length, 3, `all three are there after the restart: ${JSON.stringify(all)}`);
  t.ok(all.filter((r) => r.status === 'pending').length <= 2, 'the queued ones are pending or done, never lost');
  const final = await eventually(async () => {
    const r = await ingress(keel, '/ListObj/ri/items');
    return r.body.length === 3 && r.body;
  });
  t.same(final, ['r0', 'r1', 'r2'], 'nothing lost, arrival order kept');
  t.same(stepsOf('ListObj', 'ri').filter((s) => s.ev === 'start').map((s) => s.item), ['r0', 'r1', 'r2'], 'r0 was not restarted from scratch');
});

t.test('a shared handler writing state is refused (RT0017) and nothing is written', async (t) => {
  const keel = await setup(t);
  await ingress(keel, '/ListObj/bw/setMany', { ok: 1 });
  const s = await ingress(keel, '/ListObj/bw/badWrite/send');
  t.equal(s.status, 202);
  const id = s.body.invocationId;
  const row = await eventually(async () => {
    const [r] = await query(keel, `SELECT status, last_failure_error_code FROM sys_invocation WHERE id = '${id}'`);
    return r?.last_failure_error_code && r;
  }).catch(() => undefined);
  t.equal(row?.last_failure_error_code, 'RT0017', JSON.stringify(row));
  t.not(row?.status, 'completed');
  t.same((await ingress(keel, '/ListObj/bw/snapshot')).body, { keys: ['ok'], values: { ok: 1 } }, 'the write did not happen');
  const out = await request(keel, 'GET', `/restate/invocation/${id}/output`);
  t.not(out.status, 200, 'no successful result');
});

t.test('over an HTTP/1.1 request-response deployment (each await suspends): state ops and serialisation, eager and lazy', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [listObj, lazyListObj], { http1: true }), { use_http_11: true });
  for (const name of ['ListObj', 'LazyListObj']) {
    t.equal((await ingress(keel, `/${name}/h1/setMany`, { a: 1, b: 2 })).status, 200);
    const results = await Promise.all(['x', 'y', 'z'].map((item) => ingress(keel, `/${name}/h1/append`, { item, ms: 50 })));
    for (const r of results) t.equal(r.status, 200, JSON.stringify(r.body));
    const snap = await ingress(keel, `/${name}/h1/snapshotExclusive`);
    t.equal(snap.status, 200, JSON.stringify(snap.body));
    t.same(snap.body.keys, ['a', 'b', 'items'], name);
    t.same([...snap.body.values.items].sort(), ['x', 'y', 'z'], `${name}: no update lost`);
    t.equal((await ingress(keel, `/${name}/h1/clearOne`, 'a')).status, 200);
    const rw = await ingress(keel, `/${name}/h1/setThenRead`, { k: 'b', v: 3 });
    t.same(rw.body, { before: 2, after: 3, cleared: null }, name);
    t.same((await ingress(keel, `/${name}/h1/snapshot`)).body.keys, ['b', 'items'], name);
  }
});
