// The seed's Greeter end to end through a real Keel process: register, call, send, errors,
// bare-string handlers, HTTP/1.1 request-response deployments and protocol versions v5-v7.
import t from 'tap';
import { greeter } from '../examples/greeter/greeter.mjs';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { countingGreeter, bareGreeter, serveWithMaxProtocol } from './services/core-services.mjs';

const INV_ID = /^inv_1[0-9a-zA-Z]{33}$/;

t.test('the example Greeter: register, call, 200 with the result and an invocation id', async (t) => {
  const keel = await startKeel(t);
  const uri = await serveServices(t, [greeter]);
  const dep = await register(keel, uri);
  t.match(dep.id, /^dp_/);
  const started = Date.now();
  const r = await ingress(keel, '/Greeter/greet', { name: 'Keel' });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body, { result: 'You said hi to Keel!' });
  t.match(r.headers.get('content-type'), /^application\/json/);
  t.match(r.headers.get('x-restate-id'), INV_ID);
  t.ok(Date.now() - started >= 1000, 'the 1 s durable sleep happened');
  // Two calls get two different ids.
  const r2 = await ingress(keel, '/Greeter/greet', { name: 'Again' });
  t.same(r2.body, { result: 'You said hi to Again!' });
  t.not(r2.headers.get('x-restate-id'), r.headers.get('x-restate-id'));
});

t.test('/send answers 202 at once and the invocation completes in the background', async (t) => {
  const keel = await startKeel(t);
  const g = countingGreeter({ name: 'Greeter', sleep_ms: 500 });
  await register(keel, await serveServices(t, [g.service]));
  const started = Date.now();
  const r = await ingress(keel, '/Greeter/greet/send', { name: 'Sent' });
  t.ok(Date.now() - started < 500, 'send did not wait for the handler');
  t.equal(r.status, 202);
  t.equal(r.body.status, 'Accepted');
  t.match(r.body.invocationId, INV_ID);
  t.equal(r.headers.get('x-restate-id'), r.body.invocationId);
  await eventually(() => g.count('Reminder', 'Sent') === 1);
  t.equal(g.count('Notification', 'Sent'), 1);
  const [n, m] = [g.events.find((e) => e.step === 'Notification'), g.events.find((e) => e.step === 'Reminder')];
  t.equal(n.uuid, m.uuid, 'ctx.rand is the same on replay');
  t.ok(m.at - n.at >= 500, 'the reminder ran after the sleep');
});

t.test('unknown service and unknown handler: 404 with {code, message, restate_code}', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [greeter]));
  for (const path of ['/Nope/greet', '/Greeter/nope', '/Nope/greet/send', '/Greeter/nope/send']) {
    const r = await ingress(keel, path, { name: 'x' });
    t.equal(r.status, 404, path);
    t.match(r.headers.get('content-type'), /^application\/json/, path);
    t.same(Object.keys(r.body).sort(), ['code', 'message', 'restate_code'], path);
    t.equal(r.body.restate_code, 'KEEL0011', path);
    t.equal(r.body.code, 404, path);
    t.type(r.body.message, 'string');
    t.ok(r.body.message.length > 0);
  }
});

t.test('a handler taking and returning a bare JSON string (Go/Rust style Greet)', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [bareGreeter]));
  const r = await ingress(keel, '/BareGreeter/Greet', 'Keel');
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.equal(r.body, 'You said hi to Keel!');
  t.match(r.headers.get('x-restate-id'), INV_ID);
});

t.test('the Greeter over an HTTP/1.1 deployment (request-response mode)', async (t) => {
  const keel = await startKeel(t);
  const g = countingGreeter({ name: 'Greeter', sleep_ms: 300 });
  const uri = await serveServices(t, [g.service], { http1: true });
  const dep = await register(keel, uri, { use_http_11: true });
  t.match(dep.id, /^dp_/);
  const r = await ingress(keel, '/Greeter/greet', { name: 'H1' });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body, { result: 'You said hi to H1!' });
  // Each await suspends and is resumed by a new request that replays the journal:
  // the run bodies still executed exactly once.
  t.equal(g.count('Notification', 'H1'), 1);
  t.equal(g.count('Reminder', 'H1'), 1);
  // And the example greeter itself.
  const keel2 = await startKeel(t);
  await register(keel2, await serveServices(t, [greeter], { http1: true }), { use_http_11: true });
  const r2 = await ingress(keel2, '/Greeter/greet', { name: 'Keel' });
  t.same(r2.body, { result: 'You said hi to Keel!' });
});

for (const version of [5, 6, 7]) {
  t.test(`service protocol v${version}: negotiated from the manifest and used on invoke`, async (t) => {
    const keel = await startKeel(t);
    const g = countingGreeter({ name: 'Greeter', sleep_ms: 200 });
    const { uri, seen } = await serveWithMaxProtocol(t, [g.service], version);
    await register(keel, uri);
    t.equal(seen.discoverCount, 1, 'the wrapper answered discovery');
    const r = await ingress(keel, '/Greeter/greet', { name: `v${version}` });
    t.equal(r.status, 200, JSON.stringify(r.body));
    t.same(r.body, { result: `You said hi to v${version}!` });
    t.ok(seen.invokeContentTypes.length >= 1);
    for (const ct of seen.invokeContentTypes) t.equal(ct, `application/vnd.restate.invocation.v${version}`);
    t.equal(g.count('Notification'), 1);
    t.equal(g.count('Reminder'), 1);
  });
}
