// Idempotency keys on a real Keel with real SDK services: dedup of calls and sends from the
// ingress and from handlers, attach while running, attach/output by idempotency key, the
// idempotency-expires header, and expiry after a short retention.
import t from 'tap';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { idem, idemObj, idemCaller, bodyRuns } from './services/idempotency-services.mjs';
import { entered, release } from './services/gates.mjs';
import { INV_ID, query, request, within } from './services/context-helpers.mjs';

async function setup(t, env = {}) {
  const keel = await startKeel(t, { env });
  await register(keel, await serveServices(t, [idem, idemObj, idemCaller]));
  return keel;
}

const DAY = 24 * 3600 * 1000;

t.test('idempotency-key on a call: the body runs once, same result and id, idempotency-expires', async (t) => {
  const keel = await setup(t);
  const a = await ingress(keel, '/Idem/work', 'i1', { 'idempotency-key': 'k1' });
  t.equal(a.status, 200, JSON.stringify(a.body));
  t.equal(a.body, 'i1#1');
  t.match(a.headers.get('x-restate-id'), INV_ID);
  const expires = a.headers.get('idempotency-expires');
  t.ok(expires, 'idempotency-expires is set');
  const left = Date.parse(expires) - Date.now();
  t.ok(left > DAY - 60_000 && left <= DAY, `expires in about a day (default retention): ${expires}`);

  const b = await ingress(keel, '/Idem/work', 'i1', { 'idempotency-key': 'k1' });
  t.equal(b.status, 200);
  t.equal(b.body, 'i1#1', 'the stored result');
  t.equal(b.headers.get('x-restate-id'), a.headers.get('x-restate-id'), 'the same invocation id');
  t.equal(b.headers.get('idempotency-expires'), expires);
  t.equal(bodyRuns.get('i1'), 1, 'the handler body ran once');

  const c = await ingress(keel, '/Idem/work', 'i1', { 'idempotency-key': 'k1-other' });
  t.equal(c.body, 'i1#2', 'another key is another invocation');
  t.not(c.headers.get('x-restate-id'), a.headers.get('x-restate-id'));
  const d = await ingress(keel, '/Idem/work', 'i1');
  t.equal(d.body, 'i1#3', 'no key: a new invocation');
  t.equal(d.headers.get('idempotency-expires'), null, 'no idempotency-expires without a key');
});

t.test('a repeat while the first is still running attaches and gets its result', async (t) => {
  const keel = await setup(t);
  const first = ingress(keel, '/Idem/slow', 's1', { 'idempotency-key': 'k2' });
  await eventually(() => entered('s1') === 1);
  const second = ingress(keel, '/Idem/slow', 's1', { 'idempotency-key': 'k2' });
  const early = await Promise.race([second.then(() => 'answered'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
  t.equal(early, 'waiting', 'the repeat waits for the running invocation');
  const out = await request(keel, 'GET', '/restate/invocation/Idem/slow/k2/output');
  t.equal(out.status, 470, 'output by idempotency key while running: 470');
  release('s1');
  const [a, b] = await within(5000, Promise.all([first, second]), 'idempotent calls');
  t.equal(a.status, 200);
  t.equal(b.status, 200);
  t.equal(a.body, 's1#1:released');
  t.equal(b.body, 's1#1:released');
  t.equal(a.headers.get('x-restate-id'), b.headers.get('x-restate-id'));
  t.equal(entered('s1'), 1, 'the body ran once');
  t.equal(bodyRuns.get('s1'), 1);
});

t.test('/send with an idempotency key twice: the second is PreviouslyAccepted', async (t) => {
  const keel = await setup(t);
  const a = await ingress(keel, '/Idem/work/send', 'snd', { 'idempotency-key': 'k3' });
  t.equal(a.status, 202);
  t.equal(a.body.status, 'Accepted');
  const b = await ingress(keel, '/Idem/work/send', 'snd', { 'idempotency-key': 'k3' });
  t.equal(b.status, 202);
  t.equal(b.body.status, 'PreviouslyAccepted');
  t.equal(b.body.invocationId, a.body.invocationId);
  await eventually(() => bodyRuns.get('snd') === 1);
  // a call with the same key is the same invocation: the stored result, no new run
  const c = await ingress(keel, '/Idem/work', 'snd', { 'idempotency-key': 'k3' });
  t.equal(c.body, 'snd#1');
  t.equal(c.headers.get('x-restate-id'), a.body.invocationId);
  const d = await ingress(keel, '/Idem/work/send', 'snd', { 'idempotency-key': 'k3' });
  t.equal(d.body.status, 'PreviouslyAccepted', 'also after completion');
  t.equal(bodyRuns.get('snd'), 1);
});

t.test('attach and output by idempotency key (service and keyed forms, and POST /restate/attach)', async (t) => {
  const keel = await setup(t);
  const a = await ingress(keel, '/Idem/work', 'att', { 'idempotency-key': 'k4' });
  t.equal(a.body, 'att#1');
  for (const p of ['/restate/invocation/Idem/work/k4/attach', '/restate/invocation/Idem/work/k4/output']) {
    const r = await request(keel, 'GET', p);
    t.equal(r.status, 200, p);
    t.equal(r.body, 'att#1', p);
  }
  const o = await ingress(keel, '/IdemObj/o1/work', 'objatt', { 'idempotency-key': 'k5' });
  t.equal(o.body, 'o1:objatt#1');
  for (const p of ['/restate/invocation/IdemObj/o1/work/k5/attach', '/restate/invocation/IdemObj/o1/work/k5/output']) {
    const r = await request(keel, 'GET', p);
    t.equal(r.status, 200, p);
    t.equal(r.body, 'o1:objatt#1', p);
  }
  const otherKey = await request(keel, 'GET', '/restate/invocation/IdemObj/o2/work/k5/output');
  t.equal(otherKey.status, 404, 'the object key is part of the idempotency target');
  const unknown = await request(keel, 'GET', '/restate/invocation/Idem/work/never/attach');
  t.equal(unknown.status, 404, 'an unknown idempotency key: 404');
  const post = await request(keel, 'POST', '/restate/attach', {
    body: JSON.stringify({ target: 'idempotentInvocation', service: 'IdemObj', key: 'o1', handler: 'work', idempotencyKey: 'k5' }),
    headers: { 'content-type': 'application/json' },
  });
  t.equal(post.status, 200, JSON.stringify(post.body));
  t.equal(post.body, 'o1:objatt#1');
  const lookup = await request(keel, 'POST', '/restate/lookup', {
    body: JSON.stringify({ target: 'idempotentInvocation', service: 'Idem', handler: 'work', idempotencyKey: 'k4' }),
    headers: { 'content-type': 'application/json' },
  });
  t.same(lookup.body, { invocationId: a.headers.get('x-restate-id') }, 'lookup computes the idempotent id');
  t.equal(bodyRuns.get('att'), 1);
  t.equal(bodyRuns.get('objatt'), 1);
});

t.test('idempotent calls and sends from a handler execute the target once', async (t) => {
  const keel = await setup(t);
  const twice = await ingress(keel, '/IdemCaller/callTwice', { tag: 'h1', key: 'hk1' });
  t.equal(twice.status, 200, JSON.stringify(twice.body));
  t.same(twice.body, ['h1#1', 'h1#1']);
  const again = await ingress(keel, '/IdemCaller/callOnce', { tag: 'h1', key: 'hk1' });
  t.equal(again.body, 'h1#1', 'a later caller invocation gets the stored result');
  t.equal(bodyRuns.get('h1'), 1);
  const obj = await ingress(keel, '/IdemCaller/callObj', { obj: 'x', tag: 'h2', key: 'hk2' });
  const obj2 = await ingress(keel, '/IdemCaller/callObj', { obj: 'x', tag: 'h2', key: 'hk2' });
  t.equal(obj.body, 'x:h2#1');
  t.equal(obj2.body, 'x:h2#1');
  t.equal(bodyRuns.get('h2'), 1);
  // the ingress and handlers share the idempotency id: an ingress call with the key attaches
  const viaIngress = await ingress(keel, '/Idem/work', 'h1', { 'idempotency-key': 'hk1' });
  t.equal(viaIngress.body, 'h1#1');

  const sent = await ingress(keel, '/IdemCaller/sendTwice', { tag: 'h3', key: 'hk3' });
  t.equal(sent.body, 'sent');
  await eventually(() => bodyRuns.get('h3') === 1);
  await eventually(async () => (await query(keel, "SELECT id FROM sys_invocation WHERE status != 'completed'")).length === 0);
  const h3 = await ingress(keel, '/Idem/work', 'h3', { 'idempotency-key': 'hk3' });
  t.equal(h3.body, 'h3#1');
  const rows = await query(keel, "SELECT id FROM sys_invocation WHERE target_service_name = 'Idem' AND target_handler_name = 'work' AND idempotency_key = 'hk3'");
  t.equal(rows.length, 1, 'one target invocation for the two sends');
  t.equal(bodyRuns.get('h3'), 1, 'the sent target ran once');
});

t.test('after a short idempotency retention expires, the same key runs the handler again', async (t) => {
  const keel = await setup(t, { KEEL_WORKER__CLEANUP_INTERVAL: '200ms' });
  const a = await ingress(keel, '/Idem/short', 'e1', { 'idempotency-key': 'k6' });
  t.equal(a.body, 'e1#1');
  const expires = Date.parse(a.headers.get('idempotency-expires'));
  const left = expires - Date.now();
  t.ok(left > 0 && left <= 1000, `expires within the 1 s retention (${left} ms left)`);
  const b = await ingress(keel, '/Idem/short', 'e1', { 'idempotency-key': 'k6' });
  t.equal(b.body, 'e1#1', 'within the retention: the stored result');
  t.equal(b.headers.get('x-restate-id'), a.headers.get('x-restate-id'));
  let seen = '';
  await eventually(async () => {
    const r = await request(keel, 'GET', '/restate/invocation/Idem/short/k6/output');
    seen = `${r.status} ${JSON.stringify(r.body)}`;
    return r.status === 404;
  }, { timeout_ms: 10_000 }).catch((err) => t.fail(`still answered ${seen}: ${err.message}`));
  t.ok(Date.now() >= expires, 'not removed before it expired');
  const c = await ingress(keel, '/Idem/short', 'e1', { 'idempotency-key': 'k6' });
  t.equal(c.status, 200);
  t.equal(c.body, 'e1#2', 'the handler ran again');
  t.equal(bodyRuns.get('e1'), 2);
});

t.test('while an idempotent call runs: a send with the key is PreviouslyAccepted, attach by key blocks then answers', async (t) => {
  const keel = await setup(t);
  const call = ingress(keel, '/Idem/slow', 's2', { 'idempotency-key': 'k7' });
  await eventually(() => entered('s2') === 1);
  const send = await ingress(keel, '/Idem/slow/send', 's2', { 'idempotency-key': 'k7' });
  t.equal(send.status, 202);
  t.equal(send.body.status, 'PreviouslyAccepted');
  const attaching = request(keel, 'GET', '/restate/invocation/Idem/slow/k7/attach');
  const early = await Promise.race([attaching.then(() => 'answered'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
  t.equal(early, 'waiting', 'attach by idempotency key blocks while running');
  release('s2');
  const [c, a] = await within(5000, Promise.all([call, attaching]), 'call and attach');
  t.equal(c.body, 's2#1:released');
  t.equal(a.status, 200);
  t.equal(a.body, 's2#1:released');
  t.equal(send.body.invocationId, c.headers.get('x-restate-id'));
  t.equal(bodyRuns.get('s2'), 1);
});

t.test('a delayed idempotent send: the repeat is PreviouslyAccepted while scheduled, it runs once', async (t) => {
  const keel = await setup(t);
  const a = await ingress(keel, '/Idem/work/send?delay=PT1S', 'dly', { 'idempotency-key': 'k8' });
  t.equal(a.status, 202);
  t.equal(a.body.status, 'Accepted');
  const b = await ingress(keel, '/Idem/work/send?delay=PT1S', 'dly', { 'idempotency-key': 'k8' });
  t.equal(b.body.status, 'PreviouslyAccepted');
  t.equal(b.body.invocationId, a.body.invocationId);
  const out = await request(keel, 'GET', '/restate/invocation/Idem/work/k8/output');
  t.equal(out.status, 470, 'scheduled: not ready');
  const att = await request(keel, 'GET', '/restate/invocation/Idem/work/k8/attach');
  t.equal(att.status, 200);
  t.equal(att.body, 'dly#1');
  t.equal(bodyRuns.get('dly'), 1);
});
