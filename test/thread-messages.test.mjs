// What crosses between the main thread and partition threads (worker.threads > 1): invoke frames
// and their outcomes (partition/frames.ts), several to a transferred buffer, and the clone-side
// helpers (threads/messages.ts): a refusal keeps its class and code, a Buffer becomes a Buffer again.
import t from 'tap';
import { PartitionThreads } from '../dist/threads/partition-threads.js';
import { silentLogger } from '../dist/common/logger.js';
import { MessageChannel } from 'node:worker_threads';
import { InvocationId, randomPartitionKey } from '../dist/common/ids.js';
import { decodeChanges, decodeInvokeRequest, decodeOutcome, encodeChanges, encodeInvokeRequest, encodeOutcome, FrameBatcher, framesOf } from '../dist/partition/frames.js';
import { NotLedHereError, PartitionMovedError } from '../dist/partition/errors.js';
import { KeelError } from '../dist/errors/index.js';
import { errorOf, errorShape, revive } from '../dist/threads/messages.js';

function invoke(id, extra = {}) {
  return { invocation_id: id.bytes, service: 'Svc', handler: 'run', key: 'k', input: Buffer.from('{"a":1}'), headers: [{ key: 'h', value: 'v' }], service_type: 'VirtualObject', handler_type: 'Exclusive', ...extra };
}

t.test('an invoke request survives its frame: flags, flow scope and limit key (or none), the command', async (t) => {
  const cases = [
    { deterministic: false, send: false, workflow_run: false },
    { deterministic: true, send: true, workflow_run: false, flow: { scope: 'tenant-ä', limit_key: 'a/b' } },
    { deterministic: true, send: false, workflow_run: true, flow: { scope: 's', limit_key: undefined } },
  ];
  for (const [q, c] of cases.entries()) {
    const id = InvocationId.random(randomPartitionKey());
    const frame = encodeInvokeRequest(q + 7, { id, ...c, invoke: invoke(id) });
    const back = decodeInvokeRequest(frame);
    t.equal(back.q, q + 7);
    t.equal(back.req.id.text, id.text);
    t.same({ deterministic: back.req.deterministic, send: back.req.send, workflow_run: back.req.workflow_run, flow: back.req.flow }, { ...c, flow: c.flow });
    t.equal(back.req.invoke.service, 'Svc');
    t.equal(Buffer.from(back.req.invoke.input).toString(), '{"a":1}');
  }
  const id = InvocationId.random(randomPartitionKey());
  t.throws(() => encodeInvokeRequest(1, { id, deterministic: false, send: false, workflow_run: false, flow: { scope: 'x'.repeat(70_000), limit_key: undefined }, invoke: invoke(id) }), /frame string of 70000 bytes/);
});

t.test('every outcome kind survives its frame', async (t) => {
  const kinds = ['accepted', 'previously_accepted', 'workflow_exists'];
  for (const kind of kinds) t.equal(decodeOutcome(encodeOutcome(3, { kind })).kind, kind);
  const full = decodeOutcome(encodeOutcome(4, { kind: 'backlog_full', full: { pattern: 'a/*', waiting: 5, backlog: 5, retry_after_s: 2 } }));
  t.same({ q: full.q, kind: full.kind, body: JSON.parse(full.body) }, { q: 4, kind: 'backlog_full', body: { pattern: 'a/*', waiting: 5, backlog: 5, retry_after_s: 2 } });
  const err = decodeOutcome(encodeOutcome(5, { kind: 'error', error: errorShape(new KeelError('KEEL0008', 'busy', 409)) }));
  const rebuilt = errorOf(JSON.parse(err.body));
  t.ok(rebuilt instanceof KeelError);
  t.same({ code: rebuilt.code, status: rebuilt.status, message: rebuilt.message }, { code: 'KEEL0008', status: 409, message: 'busy' });
});

t.test("a durable batch's status changes survive their frame: statuses, purges, none", async (t) => {
  const changes = [['inv_1a', Buffer.from('{"status":"running"}')], ['inv_1b', null], ['inv_1c', Buffer.alloc(0)]];
  const frame = decodeOutcome(encodeChanges(changes, 7));
  t.equal(frame.q, 7, 'the frame carries the generation of the watch it was sent for');
  t.equal(frame.kind, 'changes');
  t.same(decodeChanges(frame.body).map(([id, s]) => [id, s === null ? null : Buffer.from(s).toString()]), [['inv_1a', '{"status":"running"}'], ['inv_1b', null], ['inv_1c', '']]);
  t.same(decodeChanges(decodeOutcome(encodeChanges([], 1)).body), [], 'an empty batch');
});

t.test('frames of one turn travel as one transferred buffer, in order', async (t) => {
  const { port1, port2 } = new MessageChannel();
  t.teardown(() => (port1.close(), port2.close()));
  const got = new Promise((resolve) => port2.once('message', resolve));
  const batcher = new FrameBatcher(port1);
  for (let q = 1; q <= 5; q++) batcher.push(encodeOutcome(q, { kind: 'accepted' }));
  const buf = await got;
  t.ok(buf instanceof ArrayBuffer, 'one ArrayBuffer');
  t.same([...framesOf(buf)].map((f) => decodeOutcome(f).q), [1, 2, 3, 4, 5], 'five frames, in the order pushed');
});

t.test('refusals keep their class across threads', async (t) => {
  const clone = (v) => structuredClone(v);
  const notLed = errorOf(clone(errorShape(new NotLedHereError(3))));
  t.ok(notLed instanceof NotLedHereError);
  t.equal(notLed.partition, 3);
  const moved = errorOf(clone(errorShape(new PartitionMovedError(5, 'inv_1abc'))));
  t.ok(moved instanceof PartitionMovedError);
  t.same([moved.partition, moved.invocation], [5, 'inv_1abc']);
  const plain = errorOf(clone(errorShape(new Error('boom'))));
  t.notOk(plain instanceof KeelError);
  t.equal(plain.message, 'boom');
});

t.test('revive: Buffers again in rows, arrays, maps and nested fields', async (t) => {
  const v = structuredClone({ value: Buffer.from('a'), list: [Buffer.from('b'), [Buffer.from('c')]], map: new Map([['k', Buffer.from('d')]]), nested: { deep: Buffer.from('e') }, n: 1n, s: 'x' });
  t.notOk(Buffer.isBuffer(v.value), 'a clone loses the class');
  const r = revive(v);
  t.ok(Buffer.isBuffer(r.value) && Buffer.isBuffer(r.list[0]) && Buffer.isBuffer(r.list[1][0]) && Buffer.isBuffer(r.map.get('k')) && Buffer.isBuffer(r.nested.deep));
  t.equal(r.nested.deep.toString('utf8'), 'e', 'and toString takes an encoding again');
  t.same([r.n, r.s], [1n, 'x']);
  const cyclic = { a: 1 };
  cyclic.self = cyclic;
  t.doesNotThrow(() => revive(cyclic), 'a cycle stops at the depth limit');
});

t.test('status changes sent for an earlier watch are dropped: the new watch\'s copy reads what they describe from the store', async (t) => {
  const threads = new PartitionThreads({ worker: { threads: 2, partitions: 8 } }, silentLogger);
  const turn = (...frames) => {
    const parts = frames.flatMap((f) => {
      const n = Buffer.alloc(4);
      n.writeUInt32LE(f.length);
      return [n, f];
    });
    const b = Buffer.concat(parts);
    return b.buffer.slice(b.byteOffset, b.byteOffset + b.length);
  };
  const seen = [];
  const stop = threads.watch((changes) => seen.push(['first', ...changes.map(([id]) => id)]));
  threads.answered(turn(encodeChanges([['inv_1a', Buffer.from('{}')]], 1)));
  stop();
  threads.answered(turn(encodeChanges([['inv_1b', Buffer.from('{}')]], 1)));
  threads.watch((changes) => seen.push(['second', ...changes.map(([id]) => id)]));
  // The engine stopped and started again: frames of the first watch were still on their way.
  threads.answered(turn(encodeChanges([['inv_1c', Buffer.from('{"status":"running"}')]], 1), encodeChanges([['inv_1d', Buffer.from('{}')]], 2)));
  t.same(seen, [['first', 'inv_1a'], ['second', 'inv_1d']], 'each watch gets only the changes sent for it');
});
