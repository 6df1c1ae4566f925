// Awakeables through a real Keel process: resolve/reject from the ingress (both route forms) and
// from other handlers, timeouts, combinators over awakeables and sleeps, and ctx.rand staying the
// same across a retry and across a Keel SIGKILL + restart.
import t from 'tap';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { awakeableServices } from './services/awakeable-services.mjs';
import { recorded, tag, getInvocation, crashAndRestart, FAST_RETRY } from './services/invocation-helpers.mjs';

async function setup(t, env = {}) {
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '4', ...FAST_RETRY, ...env } });
  await register(keel, await serveServices(t, awakeableServices));
  return keel;
}

async function send(keel, path, body) {
  const r = await ingress(keel, `${path}/send`, body);
  if (r.status !== 202) throw new Error(`send ${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.invocationId;
}

/** Waits until the handler published `count` things under tg; returns the last. */
async function published(tg) {
  return eventually(() => recorded(tg).length > 0 && recorded(tg)[0]);
}

async function rawPost(keel, p, body, contentType = 'application/json') {
  const res = await fetch(keel.ingress + p, { method: 'POST', headers: { 'content-type': contentType }, body });
  return { status: res.status, text: await res.text() };
}

t.test('resolve from the ingress: /restate/awakeables/{id}/resolve and /restate/a/{id}/resolve', async (t) => {
  const keel = await setup(t);
  for (const prefix of ['/restate/awakeables', '/restate/a']) {
    const tg = tag('res');
    const inv = await send(keel, '/Awk/wait', tg);
    const id = await published(tg);
    t.match(id, /^(sign|prom)_1/);
    const out = await getInvocation(keel, inv, 'output');
    t.equal(out.status, 470, 'not completed while awaiting the awakeable');
    const r = await rawPost(keel, `${prefix}/${id}/resolve`, JSON.stringify({ hello: prefix, n: [1, 2] }));
    t.equal(r.status, 202, r.text);
    const done = await getInvocation(keel, inv, 'attach');
    t.equal(done.status, 200, JSON.stringify(done.body));
    t.same(done.body, { value: { hello: prefix, n: [1, 2] } });
  }
  // Bad ids and methods.
  t.equal((await rawPost(keel, '/restate/awakeables/nope/resolve', '1')).status, 400);
  const res = await fetch(`${keel.ingress}/restate/awakeables/sign_1abc/resolve`, { method: 'GET' });
  t.equal(res.status, 405, 'awakeable routes are POST only');
});

t.test('reject from the ingress: the handler gets a TerminalError with the reason', async (t) => {
  const keel = await setup(t);
  for (const prefix of ['/restate/awakeables', '/restate/a']) {
    const tg = tag('rej');
    const inv = await send(keel, '/Awk/wait', tg);
    const id = await published(tg);
    const r = await rawPost(keel, `${prefix}/${id}/reject`, 'the reason is ' + prefix, 'text/plain');
    t.equal(r.status, 202, r.text);
    const done = await getInvocation(keel, inv, 'attach');
    t.equal(done.status, 200, JSON.stringify(done.body));
    t.same(done.body, { error: 'the reason is ' + prefix, code: 500, terminal: true, timeout: false });
  }
});

t.test('resolve and reject from another handler (ctx.resolveAwakeable / rejectAwakeable)', async (t) => {
  const keel = await setup(t);
  const tg = tag('h');
  const inv = await send(keel, '/Awk/wait', tg);
  const id = await published(tg);
  const r = await ingress(keel, '/Awk/resolveOther', { id, value: { from: 'handler' } });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same((await getInvocation(keel, inv)).body, { value: { from: 'handler' } });

  const tg2 = tag('h2');
  const inv2 = await send(keel, '/Awk/wait', tg2);
  const id2 = await published(tg2);
  t.equal((await ingress(keel, '/Awk/rejectOther', { id: id2, reason: 'nope from handler' })).status, 200);
  t.same((await getInvocation(keel, inv2)).body, { error: 'nope from handler', code: 500, terminal: true, timeout: false });

  // Completing an already completed awakeable again changes nothing.
  const again = await ingress(keel, '/Awk/resolveOther', { id, value: 'second' });
  t.equal(again.status, 200);
  t.same((await getInvocation(keel, inv, 'output')).body, { value: { from: 'handler' } });
});

t.test('awakeable with a timeout: TimeoutError when nobody resolves, the value otherwise', async (t) => {
  const keel = await setup(t);
  const tg = tag('to');
  const started = Date.now();
  const r = await ingress(keel, '/Awk/waitTimeout', { tag: tg, ms: 500 });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.match(r.body, { terminal: true, timeout: true, code: 408 });
  t.ok(Date.now() - started >= 500, 'waited for the timeout');

  const tg2 = tag('to2');
  const inv = await send(keel, '/Awk/waitTimeout', { tag: tg2, ms: 5000 });
  const id = await published(tg2);
  await rawPost(keel, `/restate/awakeables/${id}/resolve`, '"in time"');
  t.same((await getInvocation(keel, inv)).body, { value: 'in time' });
});

t.test('combinators: race, all, any, allSettled over awakeables and sleeps', async (t) => {
  const keel = await setup(t);
  // race: the sleep wins when nobody resolves...
  const slept = await ingress(keel, '/Awk/race', { tag: tag('race'), sleepMs: 300 });
  t.equal(slept.status, 200, JSON.stringify(slept.body));
  t.equal(slept.body, 'slept');
  // ...the awakeable wins when resolved before a long sleep.
  const tg = tag('race2');
  const inv = await send(keel, '/Awk/race', { tag: tg, sleepMs: 60_000 });
  await rawPost(keel, `/restate/a/${await published(tg)}/resolve`, '7');
  const won = await getInvocation(keel, inv);
  t.same(won.body, { awakeable: 7 });

  // all: resolved in reverse order, results in argument order.
  const tgAll = tag('all');
  const invAll = await send(keel, '/Awk/all', tgAll);
  const [a, b] = await published(tgAll);
  await rawPost(keel, `/restate/a/${b}/resolve`, '"second"');
  await new Promise((r) => setTimeout(r, 50));
  t.equal((await getInvocation(keel, invAll, 'output')).status, 470, 'all waits for every promise');
  await rawPost(keel, `/restate/a/${a}/resolve`, '"first"');
  t.same((await getInvocation(keel, invAll)).body, ['first', 'second', 'slept']);

  // any: the first one is rejected, the second resolved: any gives the second.
  const tgAny = tag('any');
  const invAny = await send(keel, '/Awk/any', tgAny);
  const [x, y] = await published(tgAny);
  await rawPost(keel, `/restate/a/${x}/reject`, 'x failed', 'text/plain');
  await rawPost(keel, `/restate/a/${y}/resolve`, '"y ok"');
  const anyOut = await getInvocation(keel, invAny);
  t.equal(anyOut.status, 200, JSON.stringify(anyOut.body));
  t.equal(anyOut.body, 'y ok');

  // any with every input rejected: an aggregate failure naming both.
  const tgAnyF = tag('anyf');
  const invAnyF = await send(keel, '/Awk/anyAllFail', tgAnyF);
  const [p, q] = await published(tgAnyF);
  await rawPost(keel, `/restate/a/${p}/reject`, 'p failed', 'text/plain');
  await rawPost(keel, `/restate/a/${q}/reject`, 'q failed', 'text/plain');
  const allFailed = await getInvocation(keel, invAnyF);
  t.equal(allFailed.status, 200, JSON.stringify(allFailed.body));
  t.same(allFailed.body.errors, ['p failed', 'q failed']);

  // allSettled: one rejected awakeable and a sleep.
  const tgS = tag('settled');
  const invS = await send(keel, '/Awk/allSettled', tgS);
  await rawPost(keel, `/restate/a/${await published(tgS)}/reject`, 'settled failure', 'text/plain');
  t.same((await getInvocation(keel, invS)).body, [{ err: 'settled failure' }, { ok: 'slept' }]);
});

t.test('deterministic random: ctx.rand gives the same values across a retry', async (t) => {
  const keel = await setup(t);
  const tg = tag('rand');
  const r = await ingress(keel, '/Awk/randRetry', tg);
  t.equal(r.status, 200, JSON.stringify(r.body));
  const seen = recorded(tg);
  t.ok(seen.length >= 2, 'ran at least twice');
  for (const v of seen) t.same(v, seen[0], 'same values on every attempt');
  t.match(seen[0].uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  t.not(seen[0].r, seen[0].r2, 'successive values differ');
  t.same({ uuid: r.body.uuid, r: r.body.r, r2: r.body.r2 }, seen[0]);
  // A different invocation gets different values.
  const tg2 = tag('rand2');
  const r2 = await ingress(keel, '/Awk/randRetry', tg2);
  t.not(r2.body.uuid, r.body.uuid);
});

t.test('deterministic random: the same values after a Keel SIGKILL + restart', async (t) => {
  const keel = await setup(t);
  const tg = tag('randcrash');
  const inv = await send(keel, '/Awk/randSleep', { tag: tg, ms: 1500 });
  await published(tg);
  await crashAndRestart(keel);
  const done = await getInvocation(keel, inv);
  t.equal(done.status, 200, JSON.stringify(done.body));
  const seen = recorded(tg);
  t.ok(seen.length >= 2, `replayed after the restart (${seen.length} attempts)`);
  for (const v of seen) t.same(v, seen[0]);
  t.same({ uuid: done.body.uuid, r: done.body.r }, seen[0]);
});
