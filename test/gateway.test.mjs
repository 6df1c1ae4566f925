// The edge's requests of the partitions (src/partition/gateway.ts), answered in-process by a real
// Worker on a real store: each outcome of an Invoke but a full backlog, attach and output, and
// refusals. The ingress suites (idempotency, workflows, awakeables; flow-control for the full
// backlog) check the same outcomes over HTTP.
import t from 'tap';
import { LocalGateway } from '../dist/partition/gateway.js';
import { NotLedHereError } from '../dist/partition/errors.js';
import { InvocationId, randomPartitionKey } from '../dist/common/ids.js';
import { NO_INVOKER, workerStore } from './helpers/worker.mjs';

/** An output entry of the service protocol and its type. */
const OUTPUT = { entry_type: 0x0401, entry: Buffer.from([0x0a, 0x03, 0x0a, 0x01, 0x31]) };

async function setup(t, partitions = [0, 1]) {
  const store = await workerStore(t);
  const worker = store.worker();
  t.same((await worker.open(store.db, undefined, partitions)).opened, partitions);
  const started = [];
  worker.start({ ...NO_INVOKER, start: (s) => started.push(s) });
  return { worker, gateway: new LocalGateway(worker), started };
}

const request = (id, over = {}) => ({
  id,
  deterministic: false,
  send: false,
  workflow_run: false,
  invoke: { invocation_id: id.bytes, service: 'Svc', handler: 'h', key: '', input: Buffer.from('{}'), headers: [], service_type: 'Service' },
  ...over,
});

/** Ends the invocation's first attempt with an output, as the invoker would. */
async function complete(worker, id) {
  await worker.append(id, { kind: 'journal_append', journal_append: { invocation_id: id.bytes, epoch: 0, ...OUTPUT } });
  await worker.append(id, { kind: 'attempt_ended', attempt_ended: { invocation_id: id.bytes, epoch: 0, outcome: 0 } });
}

const until = async (f) => {
  const deadline = Date.now() + 5_000;
  while (!f() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  return f();
};

t.test('a call completes with its result; a send is accepted, once; a workflow run exists', async (t) => {
  const { worker, gateway } = await setup(t);
  const id = InvocationId.random(randomPartitionKey());
  const call = gateway.invoke(request(id));
  t.ok(await until(() => worker.invocation(id) !== undefined), 'the invoke was appended');
  await complete(worker, id);
  const done = await call;
  t.equal(done.kind, 'completed');
  t.equal(done.status.status, 'completed', 'with the status the attempt ended in');
  t.equal(done.status, worker.invocation(id), "the partition's own status, not a copy");

  const sent = InvocationId.random(randomPartitionKey());
  t.same(await gateway.invoke(request(sent, { send: true, deterministic: true })), { kind: 'accepted' });
  t.not(worker.invocation(sent), undefined, 'durable and known');
  t.same(await gateway.invoke(request(sent, { send: true, deterministic: true })), { kind: 'previously_accepted' }, 'the same id sent again');
  t.same(await gateway.invoke(request(sent, { deterministic: true, workflow_run: true })), { kind: 'workflow_exists' }, "a workflow's run called again");
  const attached = gateway.invoke(request(sent, { deterministic: true }));
  await complete(worker, sent);
  const result = await attached;
  t.equal(result.kind, 'completed', 'a call with an existing id waits for that invocation');
  t.equal(result.status.status, 'completed');
});

t.test('attach and output: not found, not completed, completed', async (t) => {
  const { worker, gateway } = await setup(t);
  const unknown = InvocationId.random(randomPartitionKey());
  t.equal(await gateway.attach(unknown), undefined);
  t.same(await gateway.output(unknown), { kind: 'not_found' });
  const id = InvocationId.random(randomPartitionKey());
  await gateway.invoke(request(id, { send: true }));
  t.same(await gateway.output(id), { kind: 'not_completed' });
  const attached = gateway.attach(id);
  await complete(worker, id);
  t.equal((await attached).status, 'completed', 'attach waited for the result');
  const out = await gateway.output(id);
  t.equal(out.kind, 'completed');
  t.equal(out.status.status, 'completed');
});

t.test('a partition not open here refuses with NotLedHereError; a refused call leaves no waiter behind', async (t) => {
  const { worker, gateway } = await setup(t, [0]);
  const elsewhere = InvocationId.random((1n << 64n) - 5n); // partition 1 of 2
  const refused = (p) => p.then(() => undefined, (err) => err instanceof NotLedHereError && err.partition);
  t.equal(await refused(gateway.invoke(request(elsewhere))), 1, 'an invoke, naming the partition');
  t.equal(await refused(gateway.append(elsewhere, { kind: 'signal', signal: { invocation_id: elsewhere.bytes, idx: 1, void: true } })), 1, 'an append');
  const [processor] = worker.processors;
  processor.refusal = () => Object.assign(new Error('overloaded (test)'), { code: 'KEEL0501' });
  const here = InvocationId.random(5n); // partition 0
  await t.rejects(gateway.invoke(request(here)), { code: 'KEEL0501' });
  t.equal(worker.invocation(here), undefined, 'not accepted');
  t.equal(worker.waiters.size, 0, 'and the call that waited for it stopped waiting');
});

t.test('of two calls with one id, the one refused stops waiting and the one taken still gets its result', async (t) => {
  const { worker, gateway } = await setup(t);
  const [processor] = worker.processors;
  let refusals = 0;
  const refusal = processor.refusal.bind(processor);
  processor.refusal = (kind, fromOutbox) => (kind === 'invoke' && refusals++ === 0 ? Object.assign(new Error('overloaded (test)'), { code: 'KEEL0501' }) : refusal(kind, fromOutbox));
  const id = InvocationId.random(5n); // partition 0
  const first = gateway.invoke(request(id, { deterministic: true }));
  const second = gateway.invoke(request(id, { deterministic: true }));
  await t.rejects(first, { code: 'KEEL0501' }, 'the first append was refused');
  t.ok(await until(() => worker.invocation(id) !== undefined), "the second's was taken");
  await complete(worker, id);
  const outcome = await Promise.race([second, new Promise((r) => setTimeout(() => r('still waiting'), 3_000).unref())]);
  t.equal(outcome.kind, 'completed', 'and its caller got the result');
  t.equal(worker.waiters.size, 0, 'nobody waits any more');
});
