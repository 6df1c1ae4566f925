// The ingress HTTP API on a real Keel with real SDK services: headers reaching the handler, raw
// bytes, delayed sends (ISO and friendly durations, across a restart), the 1.7 call/send paths,
// attach/output by invocation id, and the error shapes.
import t from 'tap';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { echo, echoObj, executions } from './services/ingress-services.mjs';
import { release } from './services/gates.mjs';
import { INV_ID, query, request, restartKeel, statusOf, within } from './services/context-helpers.mjs';

async function setup(t) {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [echo, echoObj]));
  return keel;
}

const ran = (tag) => executions.filter((e) => e.tag === tag);

t.test('ingress request headers reach the handler, minus connection, host and idempotency-key', async (t) => {
  const keel = await setup(t);
  const r = await ingress(keel, '/Echo/headers', undefined, { 'x-foo': 'bar', 'X-Mixed-Case': 'Yes', 'idempotency-key': 'hk-1' });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.equal(r.body['x-foo'], 'bar');
  t.equal(r.body['x-mixed-case'], 'Yes');
  t.notOk('idempotency-key' in r.body, 'idempotency-key is not forwarded');
  t.notOk('connection' in r.body, 'connection is not forwarded');
  t.notOk('host' in r.body, 'host is not forwarded');
  t.equal(r.body['x-restate-ingress-path'], '/Echo/headers', 'plus x-restate-ingress-path');
  const plain = await ingress(keel, '/Echo/headers', undefined, { 'x-foo': 'other' });
  t.equal(plain.body['x-foo'], 'other', 'each invocation gets its own request headers');
  const get = await request(keel, 'GET', '/Echo/headers?q=1', { headers: { 'x-foo': 'via-get' } });
  t.equal(get.status, 200, 'GET calls a handler too');
  t.equal(get.body['x-foo'], 'via-get');
  t.equal(get.body['x-restate-ingress-path'], '/Echo/headers?q=1', 'path and query');
});

t.test('raw (non-JSON) input and output with serde.binary', async (t) => {
  const keel = await setup(t);
  const bytes = Buffer.from([0, 1, 2, 0x7b, 0xff, 0xfe, 0x0a]);
  const r = await request(keel, 'POST', '/Echo/reverse', { body: bytes, headers: { 'content-type': 'application/octet-stream' } });
  t.equal(r.status, 200, r.raw.toString());
  t.match(r.headers.get('content-type'), /^application\/octet-stream/);
  t.same([...r.raw], [...bytes].reverse());
  const empty = await request(keel, 'POST', '/Echo/reverse', { body: Buffer.alloc(0), headers: { 'content-type': 'application/octet-stream' } });
  t.equal(empty.status, 200);
  t.equal(empty.raw.length, 0);
});

// 3 s: the checks before it runs (the status comes through the SQL engine, whose first query
// waits for its start) must fit in the delay even on a slow machine.
for (const delay of ['PT3S', '3s']) {
  t.test(`/send?delay=${delay} schedules the invocation`, async (t) => {
    const keel = await setup(t);
    const tag = `delay-${delay}`;
    const sentAt = Date.now();
    const r = await ingress(keel, `/Echo/record/send?delay=${delay}`, tag);
    t.equal(ran(tag).length, 0, 'not run yet');
    t.equal(r.status, 202, JSON.stringify(r.body));
    t.equal(r.body.status, 'Accepted');
    t.match(r.body.invocationId, INV_ID);
    t.equal(await statusOf(keel, r.body.invocationId), 'scheduled');
    await eventually(() => ran(tag).length === 1, { timeout_ms: 15_000 });
    t.ok(ran(tag)[0].at - sentAt >= 3000, `ran ${ran(tag)[0].at - sentAt} ms after the send (>= 3000)`);
    await eventually(async () => (await statusOf(keel, r.body.invocationId)) === 'completed');
    const out = await request(keel, 'GET', `/restate/invocation/${r.body.invocationId}/output`);
    t.equal(out.body, `recorded ${tag}`);
  });
}

t.test('delay on a call is rejected with 400; a bad delay too', async (t) => {
  const keel = await setup(t);
  const r = await ingress(keel, '/Echo/record?delay=PT1S', 'call-with-delay');
  t.equal(r.status, 400, JSON.stringify(r.body));
  t.equal(r.body.code, 400);
  const bad = await ingress(keel, '/Echo/record/send?delay=soon', 'bad-delay');
  t.equal(bad.status, 400, JSON.stringify(bad.body));
  t.equal(ran('call-with-delay').length + ran('bad-delay').length, 0, 'nothing ran');
});

t.test('a delayed send survives a Keel restart during the delay', async (t) => {
  const keel = await setup(t);
  const sentAt = Date.now();
  const r = await ingress(keel, '/Echo/record/send?delay=PT2S', 'restart-delay');
  t.equal(r.status, 202);
  await restartKeel(keel);
  t.equal(ran('restart-delay').length, 0, 'not run before the delay');
  t.equal(await statusOf(keel, r.body.invocationId), 'scheduled', 'still scheduled after the restart');
  await eventually(() => ran('restart-delay').length === 1, { timeout_ms: 10_000 });
  t.ok(ran('restart-delay')[0].at - sentAt >= 2000, 'ran after the delay');
  await eventually(async () => (await statusOf(keel, r.body.invocationId)) === 'completed');
  t.equal(ran('restart-delay').length, 1, 'once');
});

t.test('1.7 forms: POST /restate/call/... and /restate/send/...', async (t) => {
  const keel = await setup(t);
  const c = await ingress(keel, '/restate/call/Echo/record', 'v17-call');
  t.equal(c.status, 200, JSON.stringify(c.body));
  t.equal(c.body, 'recorded v17-call');
  t.match(c.headers.get('x-restate-id'), INV_ID);
  const s = await ingress(keel, '/restate/send/Echo/record', 'v17-send');
  t.equal(s.status, 202, JSON.stringify(s.body));
  t.equal(s.body.status, 'Accepted');
  await eventually(() => ran('v17-send').length === 1);
  const k = await ingress(keel, '/restate/call/EchoObj/my%20key/whoami', 'hi');
  t.equal(k.status, 200, JSON.stringify(k.body));
  t.equal(k.body, 'my key:hi', 'the key is URL-decoded');
  const ks = await ingress(keel, '/restate/send/EchoObj/k2/whoami', 'sent');
  t.equal(ks.status, 202);
  await eventually(async () => (await ingress(keel, '/EchoObj/k2/last')).body === 'sent');
  const ds = await ingress(keel, '/restate/send/Echo/record?delay=3s', 'v17-delayed'); // time for the status query (see above)
  t.equal(ds.status, 202);
  t.equal(await statusOf(keel, ds.body.invocationId), 'scheduled');
});

t.test('GET /restate/invocation/{id}/attach and /output: 470 while running, the value after', async (t) => {
  const keel = await setup(t);
  const s = await ingress(keel, '/Echo/hold/send', 'att-1');
  const id = s.body.invocationId;
  await eventually(async () => (await statusOf(keel, id)) === 'running');
  const out = await request(keel, 'GET', `/restate/invocation/${id}/output`);
  t.equal(out.status, 470, JSON.stringify(out.body));
  const out17 = await request(keel, 'GET', `/restate/output/${id}`);
  t.equal(out17.status, 470, '1.7 GET /restate/output/{id} too');
  const attaching = request(keel, 'GET', `/restate/invocation/${id}/attach`);
  const attaching17 = request(keel, 'GET', `/restate/attach/${id}`);
  const early = await Promise.race([attaching.then(() => 'answered'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
  t.equal(early, 'waiting', 'attach blocks while the invocation runs');
  release('att-1');
  const att = await within(5000, attaching, 'attach');
  t.equal(att.status, 200);
  t.equal(att.body, 'att-1:released');
  t.equal(att.headers.get('x-restate-id'), id);
  const att17 = await within(5000, attaching17, 'attach 1.7');
  t.equal(att17.status, 200);
  t.equal(att17.body, 'att-1:released');
  const done = await request(keel, 'GET', `/restate/invocation/${id}/output`);
  t.equal(done.status, 200);
  t.equal(done.body, 'att-1:released');
  const again = await request(keel, 'GET', `/restate/invocation/${id}/attach`);
  t.equal(again.body, 'att-1:released', 'attach after completion answers at once');
  const other = id.slice(0, -1) + (id.endsWith('a') ? 'b' : 'a');
  const unknown = await request(keel, 'GET', `/restate/invocation/${other}/output`);
  t.equal(unknown.status, 404, `an unknown invocation id: 404 ${JSON.stringify(unknown.body)}`);
  const bad = await request(keel, 'GET', '/restate/invocation/not-an-id/output');
  t.equal(bad.status, 400, 'a malformed invocation id: 400');
});

t.test('error shapes: unknown service/handler 404, ingress-private 400, wrong method 405', async (t) => {
  const keel = await setup(t);
  for (const p of ['/Nope/record', '/Echo/nope', '/restate/call/Nope/x', '/EchoObj/k/nope']) {
    const r = await ingress(keel, p, 'x');
    t.equal(r.status, 404, p);
    t.match(r.headers.get('content-type'), /^application\/json/, p);
    t.equal(r.body.code, 404, p);
    t.type(r.body.message, 'string', p);
  }
  const priv = await ingress(keel, '/Echo/secret', 'x');
  t.equal(priv.status, 400, JSON.stringify(priv.body));
  t.equal(priv.body.code, 400);
  t.type(priv.body.message, 'string');
  const privSend = await ingress(keel, '/Echo/secret/send', 'x');
  t.equal(privSend.status, 400);
  const internal = await ingress(keel, '/Echo/callSecret', 'inside');
  t.equal(internal.status, 200, JSON.stringify(internal.body));
  t.equal(internal.body, 'secret inside', 'private handlers are callable from other services');
  const put = await request(keel, 'PUT', '/Echo/record', { body: '"x"', headers: { 'content-type': 'application/json' } });
  t.equal(put.status, 405);
  t.equal(ran('x').length, 0);
});
