// The TimerWindow's failure paths, over a store that answers from a sorted list: a firing the
// partition refuses is tried again (it would otherwise wait for a restart: no refill reads a key
// at or below the window's bound), and a refill that fails is tried again.
import t from 'tap';
import { TimerWindow } from '../dist/partition/timers.js';
import { timersTable } from '../dist/storage/tables/timers.js';
import { silentLogger } from '../dist/common/logger.js';

/** A store of timer keys for partition 0; `failReads` reads fail before one succeeds. */
function store(timers, { failReads = 0 } = {}) {
  const keys = timers.map((tm) => timersTable.key(0, tm)).sort();
  let failures = failReads;
  return {
    keys: ({ gt, gte, lt, limit }) => ({
      all: async () => {
        if (failures-- > 0) throw new Error('injected read failure');
        return keys.filter((k) => (gt === undefined || k > gt) && (gte === undefined || k >= gte) && k < lt).slice(0, limit);
      },
    }),
  };
}
const timer = (n, wake_up_ms) => ({ id: `inv_${n}`, completion_id: 1, wake_up_ms, kind: 0 });
const until = async (f, ms = 5_000) => {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error('not in time');
    await new Promise((r) => setTimeout(r, 10));
  }
};

t.test('a firing refused by the partition is tried again a second later', async (t) => {
  const now = Date.now();
  const fired = [];
  let refusals = 1;
  const fire = async (tm) => {
    if (tm.id === 'inv_a' && refusals-- > 0) throw Object.assign(new Error('overloaded'), { code: 'KEEL0501' });
    fired.push(tm.id);
  };
  const w = new TimerWindow(store([timer('a', now), timer('b', now + 50)]), 0, 4, fire, silentLogger);
  t.teardown(() => w.stop());
  w.start();
  await until(() => fired.includes('inv_b'));
  t.same(fired, ['inv_b'], 'a was refused, b fired');
  await until(() => fired.includes('inv_a'));
  t.same(fired, ['inv_b', 'inv_a'], 'a fired on its retry');
});

t.test('a refill that fails is tried again; a timer that arrived meanwhile (stored before it is added) fires', async (t) => {
  const now = Date.now();
  const fired = [];
  // The fold stores a timer before the worker adds it: the store holds both.
  const w = new TimerWindow(store([timer('stored', now + 100), timer('arrived', now)], { failReads: 1 }), 0, 4, async (tm) => void fired.push(tm.id), silentLogger);
  t.teardown(() => w.stop());
  w.start();
  w.add(timer('arrived', now)); // during the first (failing) read
  await until(() => fired.length === 2, 5_000);
  t.same(fired, ['inv_arrived', 'inv_stored'], 'both fired, in due order, once the store was read again');
});
