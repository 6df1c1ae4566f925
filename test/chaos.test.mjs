// Chaos: SIGKILL at random moments under mixed load (calls, calls between services, sends,
// delayed sends, virtual objects, workflows with durable promises), several times. After each
// kill every partition is rebuilt from its log and compared with the stored state; at the end a
// history checker verifies that every accepted invocation completed exactly once and that every
// object's state equals the fold of its completed calls.
import t from 'tap';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, query, eventually } from './helpers/keel.mjs';
import { openWorkerStore } from '../dist/storage/store.js';
import { verifyPartition } from '../dist/partition/verify.js';

const PARTITIONS = 4;
const KILLS = 4;
const CLIENTS = 24;

/** What the handlers saw, by the tag each request carries: tag -> invocation ids that ran it. */
const seen = new Map();
const see = (tag, id) => {
  const ids = seen.get(tag) ?? new Set();
  ids.add(id);
  seen.set(tag, ids);
};

const work = restate.service({
  name: 'Work',
  handlers: {
    run: async (ctx, { tag }) => {
      see(tag, ctx.request().id);
      const step = await ctx.run('step', () => `done ${tag}`);
      await ctx.sleep({ milliseconds: 20 });
      return step;
    },
    /** A call to another service, and a one-way send, from inside a handler. */
    fanout: async (ctx, { tag }) => {
      see(tag, ctx.request().id);
      const child = await ctx.serviceClient(work).run({ tag: `${tag}/child` });
      ctx.serviceSendClient(work).run({ tag: `${tag}/sent` });
      return child;
    },
  },
});

const account = restate.object({
  name: 'Account',
  handlers: {
    add: async (ctx, { tag, amount }) => {
      see(tag, ctx.request().id);
      const balance = ((await ctx.get('balance')) ?? 0) + amount;
      ctx.set('balance', balance);
      await ctx.run('note', () => tag);
      return balance;
    },
    balance: restate.handlers.object.shared(async (ctx) => (await ctx.get('balance')) ?? 0),
  },
});

const flow = restate.workflow({
  name: 'Flow',
  handlers: {
    run: async (ctx, { tag }) => {
      see(tag, ctx.request().id);
      const value = await ctx.promise('go').get();
      return `${tag}:${value}`;
    },
    approve: async (ctx, value) => {
      await ctx.promise('go').resolve(value);
      return 'ok';
    },
  },
});

const rnd = (n) => Math.floor(Math.random() * n);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** One request of the mix; returns its record for the checker. */
async function request(keel, i) {
  const tag = `r${i}`;
  const kinds = ['call', 'fanout', 'send', 'delayed', 'object', 'workflow'];
  const kind = kinds[i % kinds.length];
  const key = `acct${rnd(8)}`;
  const amount = 1 + rnd(9);
  const routes = {
    call: ['/Work/run', { tag }],
    fanout: ['/Work/fanout', { tag }],
    send: ['/Work/run/send', { tag }],
    delayed: ['/Work/run/send?delay=300ms', { tag }],
    object: [`/Account/${key}/add`, { tag, amount }],
    workflow: [`/Flow/${tag}/run/send`, { tag }],
  };
  const [route, body] = routes[kind];
  const record = { tag, kind, key, amount, status: 0, id: undefined };
  try {
    const res = await fetch(keel.ingress + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(30_000) });
    record.status = res.status;
    record.id = res.headers.get('x-restate-id') ?? undefined;
    await res.text();
    if (kind === 'workflow' && res.status === 202) {
      // The promise is resolved by another request, itself cut short by a kill now and then.
      await fetch(`${keel.ingress}/Flow/${tag}/approve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '"yes"', signal: AbortSignal.timeout(30_000) }).then((r) => r.text(), () => {});
    }
  } catch {
    record.status = -1; // the server died under it: accepted or not is for the checker to find out
  }
  return record;
}

async function verifyStore(t, keel, round) {
  const db = await openWorkerStore(path.join(keel.dir, 'data', 'worker'));
  try {
    for (let p = 0; p < PARTITIONS; p++) t.same(await verifyPartition(db, p), [], `after kill ${round}: partition ${p} is the fold of its log`);
    // Folded again with no object state in memory (every read goes to what the rebuild wrote).
    for (let p = 0; p < PARTITIONS; p++) t.same(await verifyPartition(db, p, 1), [], `after kill ${round}: partition ${p}, rebuilt with a 1-byte state cache`);
  } finally {
    await db.close();
  }
}

t.test(`chaos: ${KILLS} SIGKILLs under mixed load, nothing lost, nothing twice`, async (t) => {
  // A state cache of 2 KiB per partition: objects are evicted and read back all the time.
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: String(PARTITIONS), KEEL_WORKER__STORAGE_DB__STATE_CACHE_SIZE: '8KiB', KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms', KEEL_DEFAULT_RETRY_POLICY__MAX_INTERVAL: '500ms' } });
  await register(keel, await serveServices(t, [work, account, flow]));
  const records = [];
  let next = 0;
  let running = true;
  const client = async () => {
    while (running) {
      const r = await request(keel, next++);
      records.push(r);
      if (r.status === -1) await sleep(100);
    }
  };
  const clients = Array.from({ length: CLIENTS }, client);
  for (let k = 1; k <= KILLS; k++) {
    await sleep(800 + rnd(1500));
    await keel.kill('SIGKILL');
    await verifyStore(t, keel, k);
    await keel.launch();
  }
  await sleep(1000);
  running = false;
  await Promise.all(clients);
  // A kill may have cut the approval short: approve every workflow again (a second resolve
  // fails with 409 inside approve, which is fine), so that every run can finish.
  for (const r of records.filter((x) => x.kind === 'workflow')) {
    await fetch(`${keel.ingress}/Flow/${r.tag}/approve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '"yes"' }).then((x) => x.text());
  }

  // Every request the server acknowledged, and every one a handler saw, must complete once.
  const accepted = records.filter((r) => r.status >= 200 && r.status < 300);
  t.comment(`${records.length} requests, ${accepted.length} acknowledged, ${records.filter((r) => r.status === -1).length} failed with the server down or dying, ${KILLS} kills`);
  t.ok(accepted.length > 100, 'the load went on between the kills');
  const done = await eventually(async () => {
    const rows = await query(keel, "SELECT id, status FROM sys_invocation WHERE target_service_name IN ('Work', 'Account', 'Flow')");
    const open = rows.filter((r) => r.status !== 'completed');
    return open.length === 0 ? rows : false;
  }, { timeout_ms: 60_000 });
  const completed = new Set(done.map((r) => r.id));
  const lost = accepted.filter((r) => r.id !== undefined && !completed.has(r.id));
  t.same(lost.map((r) => r.tag), [], 'every acknowledged invocation completed');

  // One invocation per request: a tag run under two invocation ids would be a duplicate.
  const twice = [...seen].filter(([, ids]) => ids.size > 1).map(([tag]) => tag);
  t.same(twice, [], 'no request became two invocations');
  const ranOf = (tag) => [...(seen.get(tag) ?? [])][0];
  const vanished = records.filter((r) => seen.has(r.tag) && !completed.has(ranOf(r.tag)));
  t.same(vanished.map((r) => r.tag), [], 'everything a handler saw completed');
  const fanouts = accepted.filter((x) => x.kind === 'fanout');
  t.same(fanouts.filter((r) => !seen.has(`${r.tag}/child`) || !seen.has(`${r.tag}/sent`)).map((r) => r.tag), [], `the calls and sends made by ${fanouts.length} handlers ran`);

  // Each object's balance is the sum of its completed adds, each counted once.
  const keys = [...new Set(records.filter((r) => r.kind === 'object').map((r) => r.key))];
  for (const key of keys) {
    const expected = records.filter((r) => r.kind === 'object' && r.key === key && seen.has(r.tag) && completed.has(ranOf(r.tag))).reduce((a, r) => a + r.amount, 0);
    const res = await fetch(`${keel.ingress}/Account/${key}/balance`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: 'null' });
    t.equal(await res.json(), expected, `${key}: the balance is the fold of its completed adds`);
  }
  await keel.kill('SIGKILL');
  await verifyStore(t, keel, 'final');
});
