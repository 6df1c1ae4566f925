// Durable timers with a window of 4 in memory (worker.num_timers_in_memory_limit): many sleeps
// fire in due order as the window is refilled from the store, before and after a SIGKILL, and
// memory never holds more than the window.
import t from 'tap';
import assert from 'node:assert/strict';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, eventually, adminCall, query } from './helpers/keel.mjs';
import { crashAndRestart, getInvocation } from './services/invocation-helpers.mjs';

const woke = [];
/** When each nap woke (its `woke` step ran), by n. */
const wokeAt = new Map();
// When each nap's latest attempt entered the handler: after a SIGKILL every nap is re-invoked, and
// a timer that fires before its attempt is back wakes the nap whenever that attempt replays.
const entered = new Map();
const napper = restate.service({
  name: 'Napper',
  handlers: {
    nap: async (ctx, { ms, n }) => {
      entered.set(n, Date.now());
      await ctx.sleep(ms);
      await ctx.run('woke', () => {
        woke.push(n);
        wokeAt.set(n, Date.now());
      });
      return n;
    },
  },
});

/**
 * When each nap's timer was due (`naps`: n → invocation id), as Keel stored it: the Sleep
 * command's wake-up time in sys_journal. Not the duration (the sends are concurrent and shuffled,
 * so one attempt reaches its sleep later than a longer nap's), nor the test's clock at a first
 * attempt (in CI 19 of 20 naps woke ~260 ms after the time their first attempt computed and one
 * 3 ms after it: what counts is the sleep the journal holds).
 */
async function dueTimes(keel, naps) {
  const ns = new Map([...naps].map(([n, id]) => [id, n]));
  const list = [...naps.values()].map((id) => `'${id}'`).join(',');
  const rows = await query(keel, `SELECT id, sleep_wakeup_at FROM sys_journal WHERE entry_type = 'Command: Sleep' AND id IN (${list})`);
  const due = new Map(rows.map((r) => [ns.get(r.id), Date.parse(r.sleep_wakeup_at)]));
  assert.equal(due.size, naps.size, `a stored sleep for each of the ${naps.size} naps`);
  return due;
}

/** The naps sent by sendNaps, n → invocation id. */
const napsOf = (ids, offset) => new Map(ids.map((id, i) => [offset + i, id]));

/**
 * Whether `ns` woke in the order their timers were due, allowing naps due within `slack_ms` of each
 * other to swap (their completions travel to separate attempts; naps are ~150 ms apart).
 */
function inDueOrder(ns, due, slack_ms = 100) {
  return ns.every((n, i) => i === 0 || due.get(ns[i - 1]) <= due.get(n) + slack_ms);
}

/** For a failure message: the naps in due order, and how late each woke. */
function explainOrder(ns, due) {
  return `due order ${[...ns].sort((a, b) => due.get(a) - due.get(b) || a - b)}; ms late ${ns.map((n) => wokeAt.get(n) - due.get(n))}`;
}

async function partitions(keel) {
  return (await adminCall(keel, 'GET', '/partitions')).json.partitions;
}

/** Sends `count` naps at once, in shuffled order, of durations `step_ms` apart; returns their ids. */
async function sendNaps(keel, count, base_ms, step_ms, offset) {
  const order = Array.from({ length: count }, (_, i) => i).sort(() => Math.random() - 0.5);
  const sent = [];
  await Promise.all(order.map(async (i) => {
    const r = await ingress(keel, '/Napper/nap/send', { ms: base_ms + i * step_ms, n: offset + i });
    t.equal(r.status, 202);
    sent[i] = r.body.invocationId;
  }));
  return sent;
}

t.test('timers fire in due order across window refills and a SIGKILL; memory holds at most the window', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '1', KEEL_WORKER__NUM_TIMERS_IN_MEMORY_LIMIT: '4' } });
  await register(keel, await serveServices(t, [napper]));

  const ids = await sendNaps(keel, 30, 1500, 150, 0);
  let most = 0;
  const watch = setInterval(async () => {
    try {
      for (const p of await partitions(keel)) most = Math.max(most, p.timers_in_memory);
    } catch {}
  }, 20);
  t.teardown(() => clearInterval(watch));
  // A send is answered once accepted: its timer is stored once its attempt has reached the sleep.
  const p0 = await eventually(async () => {
    const [p] = await partitions(keel);
    return p.timers === 30 ? p : undefined;
  });
  t.equal(p0.timers, 30, 'every timer is stored');
  t.ok(p0.timers_in_memory <= 4, `${p0.timers_in_memory} in memory`);
  for (const id of ids) t.equal((await getInvocation(keel, id)).status, 200);
  t.same([...woke].sort((x, y) => x - y), Array.from({ length: 30 }, (_, i) => i), 'every nap woke once');
  const due = await dueTimes(keel, napsOf(ids, 0));
  t.ok(inDueOrder(woke, due), `woke in due order, 4 at a time from the store: ${woke} (${explainOrder(woke, due)})`);
  t.ok(most <= 4, `at most 4 timers in memory (${most})`);
  t.equal((await partitions(keel))[0].timers, 0, 'fired timers are deleted');

  // Stored before a SIGKILL: the restart reads the first 4, then the next, in order.
  woke.length = 0;
  const later = await sendNaps(keel, 20, 3000, 150, 100);
  await eventually(async () => (await partitions(keel))[0].timers === 20);
  await crashAndRestart(keel);
  const [after] = await partitions(keel);
  t.equal(after.timers, 20, 'the count is kept across the restart');
  t.ok(after.timers_in_memory <= 4);
  for (const id of later) t.equal((await getInvocation(keel, id)).status, 200);
  t.same([...woke].sort((x, y) => x - y), Array.from({ length: 20 }, (_, i) => 100 + i), 'every nap woke once after the restart');
  // Those due while the server was down, or before their attempts were back, wake in whatever
  // order their attempts replay (a loaded machine showed it); those due after their attempts were
  // back must wake in due order.
  const dueLater = await dueTimes(keel, napsOf(later, 100));
  const afterRestart = woke.filter((n) => dueLater.get(n) > entered.get(n) + 50);
  t.ok(inDueOrder(afterRestart, dueLater), `in due order after the restart (${afterRestart.length} due after it): ${afterRestart} (${explainOrder(afterRestart, dueLater)})`);
  t.ok(afterRestart.length >= 5, 'and enough of them were due after the restart to tell');
});

t.test('a timer earlier than the window, while the window is full, fires first', async (t) => {
  woke.length = 0;
  wokeAt.clear();
  entered.clear();
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '1', KEEL_WORKER__NUM_TIMERS_IN_MEMORY_LIMIT: '2' } });
  await register(keel, await serveServices(t, [napper]));
  const slow = await sendNaps(keel, 6, 1500, 150, 10);
  const fast = await ingress(keel, '/Napper/nap/send', { ms: 300, n: 1 });
  t.equal((await getInvocation(keel, fast.body.invocationId)).status, 200);
  for (const id of slow) t.equal((await getInvocation(keel, id)).status, 200);
  t.same([...woke].sort((x, y) => x - y), [1, 10, 11, 12, 13, 14, 15], 'every nap woke once');
  t.equal(woke[0], 1, 'the short nap, due before the window, woke first');
  const due = await dueTimes(keel, napsOf(slow, 10).set(1, fast.body.invocationId));
  t.ok(inDueOrder(woke, due), `the rest in due order: ${woke} (${explainOrder(woke, due)})`);
});
