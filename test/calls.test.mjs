// Calls and one-way sends between real SDK services through a real Keel process: results routed
// back across partitions, delayed sends surviving a SIGKILL, call ordering, unknown targets
// (RT0018), terminal error propagation, invocation handles + attach, and exactly-once calls.
import t from 'tap';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { callServices } from './services/call-services.mjs';
import { recorded, tag, query, getInvocation, invocationRow, logLinesWith, crashAndRestart, FAST_RETRY } from './services/invocation-helpers.mjs';

const INV_ID = /^inv_1[0-9a-zA-Z]{33}$/;

async function setup(t, env = {}) {
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '4', ...FAST_RETRY, ...env } });
  await register(keel, await serveServices(t, callServices));
  return keel;
}

t.test('request-response calls: service->service, service->object, object->object across keys', async (t) => {
  const keel = await setup(t);
  const r1 = await ingress(keel, '/Proxy/callService', { tag: 'a', v: 42 });
  t.equal(r1.status, 200, JSON.stringify(r1.body));
  t.same(r1.body.echoed, { tag: 'a', v: 42 });
  t.match(r1.body.id, INV_ID, 'the callee ran as its own invocation');
  t.not(r1.body.id, r1.headers.get('x-restate-id'));

  // Many keys -> with 4 partitions these certainly span partitions; results come back to the caller.
  const keys = Array.from({ length: 8 }, (_, i) => tag(`k${i}`));
  const results = await Promise.all(keys.map((key, i) => ingress(keel, '/Proxy/callObject', { key, n: i + 1 })));
  results.forEach((r, i) => {
    t.equal(r.status, 200, JSON.stringify(r.body));
    t.equal(r.body, i + 1);
  });
  const again = await ingress(keel, '/Proxy/callObject', { key: keys[3], n: 10 });
  t.equal(again.body, 14, 'state of the callee object accumulated');

  // object -> object across keys
  const src = tag('src');
  const dsts = Array.from({ length: 4 }, () => tag('dst'));
  for (const [i, dst] of dsts.entries()) {
    const r = await ingress(keel, `/Keyed/${src}/addTo`, { key: dst, n: 5 });
    t.equal(r.status, 200, JSON.stringify(r.body));
    t.same(r.body, { mine: i + 1, theirs: 5 });
  }
  for (const dst of dsts) t.equal((await ingress(keel, `/Keyed/${dst}/get`)).body, 5);
  t.equal((await ingress(keel, `/Keyed/${src}/get`)).body, 4);
});

t.test('one-way sends run in the background; the id returned is the callee invocation', async (t) => {
  const keel = await setup(t);
  const key = tag('send');
  const r = await ingress(keel, '/Proxy/send', { key, n: 7 });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.match(r.body, INV_ID);
  await eventually(async () => (await ingress(keel, `/Keyed/${key}/get`)).body === 7);
  const out = await getInvocation(keel, r.body, 'output');
  t.equal(out.status, 200);
  t.equal(out.body, 7);
  const row = await invocationRow(keel, r.body);
  t.equal(row.target_service_name, 'Keyed');
  t.equal(row.target_service_key, key);
  t.equal(row.invoked_by, 'service', 'sent by a handler, not by the ingress');
  t.equal(row.invoked_by_id, r.headers.get('x-restate-id'), 'the sender is recorded');
  t.equal(row.invoked_by_service_name, 'Proxy');
});

t.test('delayed sends: not before the delay, run after it, survive a SIGKILL + restart', async (t) => {
  const keel = await setup(t);
  const key = tag('delay');
  const sentAt = Date.now();
  const r = await ingress(keel, '/Proxy/sendDelayed', { key, n: 3, delayMs: 1500 });
  t.equal(r.status, 200, JSON.stringify(r.body));
  const id = r.body;
  const row = await invocationRow(keel, id);
  t.equal(row.status, 'scheduled');
  await new Promise((res) => setTimeout(res, 300));
  t.same(recorded(`Keyed.add:${key}`), [], 'not run before the delay');
  t.equal((await ingress(keel, `/Keyed/${key}/get`)).body, 0);

  // A second delayed send across a crash.
  const key2 = tag('delay-crash');
  const r2 = await ingress(keel, '/Proxy/sendDelayed', { key: key2, n: 9, delayMs: 2000 });
  const sent2 = Date.now();
  t.equal(r2.status, 200);
  await crashAndRestart(keel);
  await eventually(async () => (await ingress(keel, `/Keyed/${key}/get`)).body === 3, { timeout_ms: 10_000 });
  t.ok(Date.now() - sentAt >= 1500);
  t.ok(recorded(`Keyed.add:${key}`).length >= 1);
  await eventually(async () => (await ingress(keel, `/Keyed/${key2}/get`)).body === 9, { timeout_ms: 10_000 });
  t.ok(Date.now() - sent2 >= 1900, 'the restart did not fire the timer early');
  t.equal(recorded(`Keyed.add:${key2}`).length, 1, 'ran once after the restart');
  t.equal((await invocationRow(keel, r2.body)).status, 'completed');
});

t.test('call ordering: N one-way calls to one key arrive in issue order', async (t) => {
  const keel = await setup(t);
  const key = tag('order');
  const r = await ingress(keel, '/Proxy/orderedSends', { key, n: 30 });
  t.equal(r.status, 200, JSON.stringify(r.body));
  const order = await eventually(async () => {
    const o = (await ingress(keel, `/Keyed/${key}/order`)).body;
    return o.length === 30 && o;
  });
  t.same(order, Array.from({ length: 30 }, (_, i) => i));

  const key2 = tag('mixed');
  const m = await ingress(keel, '/Proxy/mixedOrder', { key: key2 });
  t.equal(m.status, 200, JSON.stringify(m.body));
  t.equal(m.body, 4, 'the final call saw both earlier sends');
  t.same((await ingress(keel, `/Keyed/${key2}/order`)).body, ['call-0', 'send-1', 'send-2', 'call-3']);
});

t.test('a call to an unknown handler fails the attempt with RT0018 and does not crash Keel', async (t) => {
  const keel = await setup(t, { KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '2' });
  const r = await ingress(keel, '/Proxy/callUnknown/send');
  t.equal(r.status, 202);
  const id = r.body.invocationId;
  await eventually(() => logLinesWith(keel, 'RT0018').length > 0);
  const line = logLinesWith(keel, 'RT0018')[0];
  t.match(line, /Nope/, 'the log names the missing target');
  const row = await eventually(async () => {
    const x = await invocationRow(keel, id);
    return x && x.status === 'paused' && x;
  });
  t.equal(row.last_failure_error_code, 'RT0018');
  t.not(row.status, 'completed');
  // Keel is alive and serves other calls.
  const ok = await ingress(keel, '/Proxy/callService', { tag: 'alive' });
  t.equal(ok.status, 200);
  t.equal(keel.proc.exitCode, null);
});

t.test('a terminal error thrown by the callee reaches the caller with code, message and metadata', async (t) => {
  const keel = await setup(t);
  const req = { code: 418, message: 'I am a teapot', metadata: { reason: 'teapot', n: '1' } };
  const caught = await ingress(keel, '/Proxy/callFailCaught', req);
  t.equal(caught.status, 200, JSON.stringify(caught.body));
  t.same(caught.body, { terminal: true, code: 418, message: 'I am a teapot', metadata: { reason: 'teapot', n: '1' } });
  // Uncaught: the caller's invocation fails with the same error, visible at the ingress.
  const direct = await ingress(keel, '/Proxy/callFail', req);
  t.equal(direct.status, 418);
  t.equal(direct.body.message, 'I am a teapot');
  t.same(direct.body.metadata, { reason: 'teapot', n: '1' });
});

t.test('invocation handles: send handle id -> ctx.attach gets the result; call handle id', async (t) => {
  const keel = await setup(t);
  const tg = tag('attach');
  const r = await ingress(keel, '/Proxy/sendAndAttach', { tag: tg, ms: 300 });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.match(r.body.id, INV_ID);
  t.equal(r.body.result, `slow ${tg}`);
  t.equal(r.body.viaRef, r.body.result);
  const out = await getInvocation(keel, r.body.id, 'output');
  t.equal(out.status, 200);
  t.equal(out.body, r.body.result);

  const c = await ingress(keel, '/Proxy/callHandleId', { tag: tag('handle') });
  t.equal(c.status, 200, JSON.stringify(c.body));
  t.match(c.body.id, INV_ID);
  t.equal(c.body.id, c.body.calleeSawId, 'the call handle id is the callee invocation id');
});

t.test('exactly once: the caller fails after the call; the callee ran once', async (t) => {
  const keel = await setup(t);
  const t1 = tag('eo1');
  const r1 = await ingress(keel, '/Proxy/exactlyOnceAfterResult', t1);
  t.equal(r1.status, 200, JSON.stringify(r1.body));
  t.equal(r1.body, 'ran 1');
  t.equal(recorded(`countRun:${t1}`).length, 1, 'callee side effect ran once');

  const t2 = tag('eo2');
  const r2 = await ingress(keel, '/Proxy/exactlyOnceBeforeResult', t2);
  t.equal(r2.status, 200, JSON.stringify(r2.body));
  t.equal(r2.body, 'ran 1');
  t.equal(recorded(`countRun:${t2}`).length, 1, 'callee invoked once although the call was replayed');
  const rows = await query(
    keel,
    `select id from sys_invocation where target_service_name = 'Callee' and target_handler_name = 'countRun'`,
  );
  t.equal(rows.length, 2, 'one callee invocation per caller');
});
