// Durable timers with a window of 4 in memory (worker.num_timers_in_memory_limit): many sleeps
// fire in due order as the window is refilled from the store, before and after a SIGKILL, and
// memory never holds more than the window.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, eventually, adminCall } from './helpers/keel.mjs';
import { crashAndRestart, getInvocation } from './services/invocation-helpers.mjs';

const woke = [];
// When each nap's timer is due, as the SDK computes it (now + ms when ctx.sleep is called, on the
// first attempt): the sends are concurrent and shuffled, so on a loaded machine an attempt can
// reach its sleep later than a longer nap's did, and due order is not duration order.
const due = new Map();
// When each nap's latest attempt entered the handler: after a SIGKILL every nap is re-invoked, and
// a timer that fires before its attempt is back wakes the nap whenever that attempt replays.
const entered = new Map();
const late = new Map();
const napper = restate.service({
  name: 'Napper',
  handlers: {
    nap: async (ctx, { ms, n }) => {
      if (!due.has(n)) due.set(n, Date.now() + ms);
      entered.set(n, Date.now());
      await ctx.sleep(ms);
      await ctx.run('woke', () => { woke.push(n); late.set(n, Date.now() - due.get(n)); });
      return n;
    },
  },
});

/** The naps in `ns` sorted by when they were due (the SDK's clock and the test's agree to ~1 ms). */
function dueOrder(ns) {
  return [...ns].sort((a, b) => due.get(a) - due.get(b) || a - b);
}

/**
 * Whether `ns` woke in due order, allowing naps due within `slack_ms` of each other to swap (on a
 * loaded machine a completion once reached its nap 80 ms late; naps are ~150 ms apart).
 */
function inDueOrder(ns, slack_ms = 100) {
  return ns.every((n, i) => i === 0 || due.get(ns[i - 1]) <= due.get(n) + slack_ms);
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
  t.ok(inDueOrder(woke), `woke in due order, 4 at a time from the store: ${woke} (due order ${dueOrder(woke)}) ms late ${woke.map((n) => late.get(n))}`);
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
  const afterRestart = woke.filter((n) => due.get(n) > entered.get(n) + 50);
  t.ok(inDueOrder(afterRestart), `in due order after the restart (${afterRestart.length} due after it): ${afterRestart} (due order ${dueOrder(afterRestart)}) ms late ${afterRestart.map((n) => late.get(n))}`);
  t.ok(afterRestart.length >= 5, 'and enough of them were due after the restart to tell');
});

t.test('a timer earlier than the window, while the window is full, fires first', async (t) => {
  woke.length = 0;
  due.clear();
  entered.clear();
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '1', KEEL_WORKER__NUM_TIMERS_IN_MEMORY_LIMIT: '2' } });
  await register(keel, await serveServices(t, [napper]));
  const slow = await sendNaps(keel, 6, 1500, 150, 10);
  const fast = await ingress(keel, '/Napper/nap/send', { ms: 300, n: 1 });
  t.equal((await getInvocation(keel, fast.body.invocationId)).status, 200);
  for (const id of slow) t.equal((await getInvocation(keel, id)).status, 200);
  t.same([...woke].sort((x, y) => x - y), [1, 10, 11, 12, 13, 14, 15], 'every nap woke once');
  t.equal(woke[0], 1, 'the short nap, due before the window, woke first');
  t.ok(inDueOrder(woke), `the rest in due order: ${woke} (due order ${dueOrder(woke)}) ms late ${woke.map((n) => late.get(n))}`);
});
