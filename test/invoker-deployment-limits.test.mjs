// The invoker's per-deployment limit without a server: attempts over a deployment's limit are
// parked aside, and every parked attempt eventually runs or fails — also when its service moves to
// a new deployment while it waits, when the deployment is removed, and when the limit is lifted.
// Fakes: a registry, an endpoint client whose streams never answer, partitions holding statuses.
import t from 'tap';
import { Invoker } from '../dist/invoker/index.js';
import { SharedSlots, sharedSlotsMemory } from '../dist/invoker/deployment-slots.js';
import { InvocationId } from '../dist/common/ids.js';
import { silentLogger } from '../dist/common/logger.js';

const config = {
  worker: { partitions: 4, invoker: { concurrent_invocations_limit: 100, inactivity_timeout_ms: 60_000, abort_timeout_ms: 60_000, message_size_limit_bytes: 1e9, disable_eager_state: false } },
  default_retry_policy: { initial_interval_ms: 50, max_interval_ms: 100, max_attempts: 10, exponentiation_factor: 2, on_max_attempts: 'pause' },
};
const deployment = (id) => ({ id, uri: 'http://127.0.0.1:9', use_http_11: false, additional_headers: {}, min_protocol_version: 5, max_protocol_version: 5 });

function setup() {
  const deployments = new Map([['D1', deployment('D1')]]);
  const limits = new Map([['D1', 1]]);
  const world = { latest: 'D1' };
  const service = () => ({ name: 'S', ty: 'Service', deployment_id: world.latest, handlers: [{ name: 'h' }] });
  const registry = { deployment: (id) => deployments.get(id), deploymentConcurrency: (id) => limits.get(id), service, handler: () => ({ service: service(), handler: { name: 'h' } }) };
  const endpoints = { openStream: () => ({ write() {}, end() {}, finish() {}, abort() {} }) };
  const statuses = new Map();
  const host = { invocation: (id) => statuses.get(id), journal: () => [], objectState: () => [], append: async () => {} };
  const invoker = new Invoker(config, registry, endpoints, silentLogger);
  const ids = [];
  for (let i = 0; i < 5; i++) {
    const id = InvocationId.random(1n).text;
    statuses.set(id, { id, status: 'running', epoch: 0, journal_length: 0, service: 'S', handler: 'h', service_type: 'Service', key: '', retry_count: 0, modified_at_ms: Date.now() });
    ids.push(id);
    invoker.start(host, id, 0);
  }
  /** Ends every live attempt, a few times over: what was parked gets its turn. */
  const finishAll = () => {
    for (let round = 0; round < 10; round++) for (const id of ids) invoker.abort(id);
  };
  return { invoker, deployments, limits, world, statuses, ids, finishAll };
}

t.test('a limit of 1: one runs, four are parked; each end lets the next one go', async (t) => {
  const s = setup();
  t.same(s.invoker.depths(), { waiting: 4, running: 1 });
  s.invoker.abort(s.ids[0]);
  t.same(s.invoker.depths(), { waiting: 3, running: 1 }, 'one ended: the next parked one runs, still one at a time');
  s.finishAll();
  t.same(s.invoker.depths(), { waiting: 0, running: 0 });
  s.invoker.stop();
});

t.test('the service moves to a new deployment while attempts wait: none stays parked', async (t) => {
  const s = setup();
  s.deployments.set('D2', deployment('D2'));
  s.world.latest = 'D2';
  s.finishAll();
  t.same(s.invoker.depths(), { waiting: 0, running: 0 }, "D1's turns pass on when the released one runs on D2");
  s.invoker.stop();
});

t.test('the deployment is removed while attempts wait: each fails (RT0011), none stays parked', async (t) => {
  const s = setup();
  s.deployments.delete('D1');
  s.limits.delete('D1');
  s.invoker.limitsChanged();
  s.finishAll();
  t.same(s.invoker.depths(), { waiting: 0, running: 0 });
  s.invoker.stop();
});

t.test('the limit is lifted: every parked attempt runs at once', async (t) => {
  const s = setup();
  s.limits.delete('D1');
  s.invoker.limitsChanged();
  t.same(s.invoker.depths(), { waiting: 0, running: 5 });
  s.invoker.stop();
});

t.test('threads: a slot freed on another thread between a refused take and the park is not lost', async (t) => {
  // Two partition threads' invokers over one table of slots, in one thread so the interleaving is exact:
  // B holds the deployment's only slot; A's take is refused, and B's attempt ends right then — before
  // A counts itself as waiting, so B announces nothing. A must see the free slot itself.
  const s = setup();
  s.finishAll();
  const memory = sharedSlotsMemory();
  const announced = [];
  let invokerA;
  const slotsB = new SharedSlots(memory, (d) => (announced.push(d), invokerA.slotFreed(d)));
  const sharedA = new SharedSlots(memory, () => {});
  const registry = { deployment: (id) => s.deployments.get(id), deploymentConcurrency: (id) => s.limits.get(id), service: () => ({ name: 'S', ty: 'Service', deployment_id: 'D1', handlers: [{ name: 'h' }] }) };
  const endpoints = { openStream: () => ({ write() {}, end() {}, finish() {}, abort() {} }) };
  const host = { invocation: (id) => s.statuses.get(id), journal: () => [], objectState: () => [], append: async () => {} };
  const invokerB = new Invoker(config, registry, endpoints, silentLogger, undefined, slotsB);
  let takes = 0;
  const slotsA = Object.assign(Object.create(sharedA), {
    take(d, cap) {
      const took = sharedA.take(d, cap);
      takes += 1;
      if (!took && takes === 1) invokerB.abort(idB); // the other thread gives its slot back now
      return took;
    },
  });
  invokerA = new Invoker(config, registry, endpoints, silentLogger, undefined, slotsA);
  const running = (id) => ({ id, status: 'running', epoch: 0, journal_length: 0, service: 'S', handler: 'h', service_type: 'Service', key: '', retry_count: 0, modified_at_ms: Date.now() });
  const idB = InvocationId.random(2n).text;
  const idA = InvocationId.random(3n).text;
  s.statuses.set(idB, running(idB));
  s.statuses.set(idA, running(idA));
  invokerB.start(host, idB, 0);
  t.same(invokerB.depths(), { waiting: 0, running: 1 }, 'B runs on the only slot');
  invokerA.start(host, idA, 0);
  t.equal(takes, 2, "A's first take was refused while B held the slot, its second took it");
  t.same(announced, [], 'B announced nothing: A did not wait yet when the slot came free');
  t.same(invokerB.depths(), { waiting: 0, running: 0 });
  t.same(invokerA.depths(), { waiting: 0, running: 1 }, 'A runs all the same: it looked again after it parked');
  invokerA.stop();
  invokerB.stop();
});
