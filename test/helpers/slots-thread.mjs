// A thread of deployment-slots.test: takes and gives slots of one deployment as fast as it can, and
// counts in `probe` how many it holds with the others at each take (the test reads the most seen).
import { workerData, parentPort } from 'node:worker_threads';
import { SharedSlots } from '../../dist/invoker/deployment-slots.js';

const { memory, probe, deployment, cap, rounds, threads } = workerData;
const slots = new SharedSlots(memory, () => {});
// [held now, most held, threads ready]: all start together (a thread's rounds take milliseconds).
const held = new Int32Array(probe);
Atomics.add(held, 2, 1);
while (Atomics.load(held, 2) < threads);
let took = 0;
for (let i = 0; i < rounds; i++) {
  if (!slots.take(deployment, cap)) continue;
  took++;
  const now = Atomics.add(held, 0, 1) + 1;
  for (let seen = Atomics.load(held, 1); now > seen; seen = Atomics.load(held, 1)) if (Atomics.compareExchange(held, 1, seen, now) === seen) break;
  Atomics.sub(held, 0, 1);
  slots.give(deployment);
}
parentPort.postMessage(took);
