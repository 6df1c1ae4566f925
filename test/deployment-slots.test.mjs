// A deployment's concurrency limit counted for one invoker (LocalSlots) and for the invokers of
// every partition thread at once (SharedSlots, over shared memory): real threads race for the
// last slot, and no more than the limit ever hold one.
import t from 'tap';
import { Worker } from 'node:worker_threads';
import { LocalSlots, SharedSlots, sharedSlotsMemory } from '../dist/invoker/deployment-slots.js';

t.test('one invoker: a capped deployment takes up to its cap, an uncapped one always', async (t) => {
  const slots = new LocalSlots();
  t.ok(slots.take('dp_a', 2));
  t.ok(slots.take('dp_a', 2));
  t.notOk(slots.take('dp_a', 2), 'the third of a cap of 2 is refused');
  t.ok(slots.full('dp_a', 2), 'full at its cap');
  t.notOk(slots.full('dp_a', 3), 'not under a higher one');
  t.notOk(slots.full('dp_a', undefined), 'never without a cap');
  slots.give('dp_a');
  t.ok(slots.take('dp_a', 2), 'a slot given back is taken again');
  for (let i = 0; i < 100; i++) t.ok(slots.take('dp_b', undefined));
  t.throws(() => new LocalSlots().give('dp_c'), /not taken/, 'a slot never taken cannot be given back');
});

t.test('shared: counts are per deployment, and a freed slot is announced only where attempts wait', async (t) => {
  const memory = sharedSlotsMemory();
  const freed = [];
  const a = new SharedSlots(memory, (d) => freed.push(`a:${d}`));
  const b = new SharedSlots(memory, (d) => freed.push(`b:${d}`));
  const ids = Array.from({ length: 2000 }, (_, i) => `dp_${i.toString(36).padStart(8, '0')}`);
  t.ok(ids.every((id) => a.take(id, 1)), '2,000 deployments, each with its own entry (a cap of 1 each, all taken)');
  t.notOk(b.take(ids[7], 1), 'the other thread sees the slot taken');
  t.ok(b.full(ids[7], 1), 'and the entry full');
  a.give(ids[7]);
  t.same(freed, [], 'nobody waits: nothing announced');
  t.notOk(b.take(ids[8], 1));
  b.waiting(ids[8], 1);
  a.give(ids[8]);
  t.same(freed, [`a:${ids[8]}`], 'the giver announces the freed slot');
  t.ok(b.take(ids[8], 1), 'and the waiting thread takes it');
  b.waiting(ids[8], -1);
  t.throws(() => b.waiting(ids[9], -1), /-1 attempts wait/, 'waiting never goes below zero');
});

t.test('four threads racing for a cap of 3 never hold more than 3', async (t) => {
  const memory = sharedSlotsMemory();
  const probe = new SharedArrayBuffer(12);
  const url = new URL('./helpers/slots-thread.mjs', import.meta.url);
  const took = await Promise.all(
    [0, 1, 2, 3].map(
      () =>
        new Promise((resolve, reject) => {
          const w = new Worker(url, { workerData: { memory, probe, deployment: 'dp_raced', cap: 3, rounds: 200_000, threads: 4 } });
          w.once('message', resolve).once('error', reject);
        }),
    ),
  );
  const most = new Int32Array(probe)[1];
  t.ok(most <= 3, `at most 3 held at once (saw ${most})`);
  t.ok(most >= 2, `and the threads did overlap (saw ${most})`);
  t.ok(took.every((n) => n > 0), `every thread took slots (${took.join(', ')})`);
  const after = new SharedSlots(memory, () => {});
  t.ok(after.take('dp_raced', 3) && after.take('dp_raced', 3) && after.take('dp_raced', 3), 'all given back: three free again');
  t.notOk(after.take('dp_raced', 3));
});
