// The sdk-test-suite scenarios (restatedev/sdk-test-suite) as one suite, run against one Keel
// process (conformance.test.mjs) or against every node of a cluster (cluster-conformance.test.mjs):
// sleeps, run flush and retries, state, user errors, non-determinism, kill.
import { ingress, eventually } from '../helpers/keel.mjs';
import { recorded, attempts, tag, adminCall, getInvocation, invocationRow, logLinesWith, crashAndRestart } from './invocation-helpers.mjs';

async function send(keel, p, body) {
  const r = await ingress(keel, `${p}/send`, body);
  if (r.status !== 202) throw new Error(`send ${p}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.invocationId;
}

/**
 * The scenarios as subtests of `t`. `keel`: what the helpers ask (a Keel, or a cluster's nodes
 * in turn); `endpoint`: the droppable SDK endpoint serving conformanceServices and lockObj;
 * `suspends`: the inactivity timeout is 0; `crash`: the KillRuntime scenario (a SIGKILL during a
 * sleep) where the target can be crashed and restarted as one.
 */
export function conformanceSuite(t, keel, endpoint, { suspends, crash = true }) {
  t.test('Sleep: many concurrent sleeps wake in order of wake time', async (t) => {
    const r = await ingress(keel, '/Sleeper/manySleeps', [900, 100, 700, 300, 500, 200]);
    t.equal(r.status, 200, JSON.stringify(r.body));
    t.same(r.body, [100, 200, 300, 500, 700, 900]);
    // Many invocations sleeping at once all wake.
    const tags = Array.from({ length: 20 }, (_, i) => [tag(`many${i}`), 100 + ((i * 37) % 400)]);
    const started = Date.now();
    const results = await Promise.all(tags.map(([tg, ms]) => ingress(keel, '/Sleeper/sleepThenRecord', { tag: tg, ms })));
    for (const [i, r] of results.entries()) t.equal(r.body, `woke ${tags[i][0]}`);
    for (const [tg, ms] of tags) t.ok(recorded(`woke:${tg}`)[0] - recorded(tg)[0] >= ms - 5, `slept at least ${ms} ms`);
    t.ok(Date.now() - started < 5000, 'they slept concurrently');
  });

  t.test('Sleep with failures: the endpoint connection drops during the sleep; it still wakes', async (t) => {
    const tg = tag('sleepfail');
    const id = await send(keel, '/Sleeper/sleepThenRecord', { tag: tg, ms: 800 });
    await eventually(() => recorded(tg).length > 0);
    const dropped = endpoint.dropConnections();
    if (!suspends) t.ok(dropped > 0, 'an open invocation stream was cut');
    const out = await getInvocation(keel, id);
    t.equal(out.status, 200, JSON.stringify(out.body));
    const slept = recorded(`woke:${tg}`)[0] - recorded(tg)[0];
    t.ok(slept >= 795, `slept ${slept} ms`);
    t.ok(slept < 5000, 'the retry did not restart the timer from scratch');
    t.equal(recorded(tg).length, 1, 'the journaled step before the sleep ran once');
  });

  t.test('RunRetry: fails twice, succeeds on the third try, journaled once', async (t) => {
    const tg = tag('runretry');
    const r = await ingress(keel, '/Runner/retry', tg);
    t.equal(r.status, 200, JSON.stringify(r.body));
    t.equal(r.body, 3);
    t.equal(attempts(`runbody:${tg}`), 3, 'the run body ran 3 times');
    t.ok(attempts(`runhandler:${tg}`) >= 2, 'the handler was replayed after the run');
  });

  t.test('RunRetry exhausted: a terminal error wrapping the failure', async (t) => {
    const tg = tag('runex');
    const r = await ingress(keel, '/Runner/exhausted', tg);
    t.equal(r.status, 200, JSON.stringify(r.body));
    t.equal(r.body.terminal, true);
    t.match(r.body.message, /run always fails/);
    t.equal(attempts(`runbody:${tg}`), 2, 'maxRetryAttempts 2: two tries');
  });

  t.test("RunRetry per step: a flaky first step's failures leave the second step its own 3 tries", async (t) => {
    const tg = tag('twosteps');
    const r = await ingress(keel, '/Runner/twoSteps', tg);
    t.equal(r.status, 200, JSON.stringify(r.body));
    t.equal(attempts(`first:${tg}`), 3, 'the first step ran until it succeeded');
    t.equal(r.body.terminal, true);
    t.match(r.body.message, /second fails 3/);
    t.equal(attempts(`second:${tg}`), 3, 'the second step had its own 3 tries (not 3 less the first step\'s 2 failures)');
  });

  t.test('RunFlush: run results are acknowledged before the handler goes on', async (t) => {
    // Always suspending: the final attempt replays every run without executing any body, every
    // time (repeated: a race between the run ack and the suspension shows up only sometimes).
    const results = [];
    for (let i = 0; i < 15; i++) {
      const r = await ingress(keel, '/Runner/countSideEffects', 3);
      t.equal(r.status, 200, JSON.stringify(r.body));
      results.push(r.body);
    }
    t.same(results, results.map(() => (suspends ? 0 : 3)));
  });

  t.test('State: add, proxy through calls, list and clearAll', async (t) => {
    const key = tag('state');
    t.equal((await ingress(keel, `/StateObj/${key}/add`, 2)).body, 2);
    t.equal((await ingress(keel, '/StateProxy/addVia', { key, n: 5 })).body, 7, 'state updated through a call');
    t.equal((await ingress(keel, `/StateObj/${key}/get`)).body, 7);
    const set = await ingress(keel, `/StateObj/${key}/setMany`, { a: 1, b: 'two', c: [3] });
    t.same(set.body, ['a', 'b', 'c', 'count']);
    t.same((await ingress(keel, '/StateProxy/keysVia', key)).body, ['a', 'b', 'c', 'count']);
    t.same((await ingress(keel, `/StateObj/${key}/read`, 'c')).body, [3]);
    t.same((await ingress(keel, `/StateObj/${key}/clearAll`)).body, []);
    t.same((await ingress(keel, `/StateObj/${key}/keys`)).body, []);
    t.equal((await ingress(keel, `/StateObj/${key}/get`)).body, null);
  });

  t.test('UserErrors: terminal errors with metadata, propagation, state kept, eventual success', async (t) => {
    const req = { code: 422, message: 'invalid order', metadata: { field: 'qty', hint: 'positive' } };
    const r = await ingress(keel, '/Errors/terminalWithMetadata', req);
    t.equal(r.status, 422);
    t.equal(r.body.message, 'invalid order');
    t.same(r.body.metadata, { field: 'qty', hint: 'positive' });
    const p = await ingress(keel, '/Errors/propagate', req);
    t.equal(p.status, 422, 'propagated through a call');
    t.equal(p.body.message, 'invalid order');
    t.same(p.body.metadata, { field: 'qty', hint: 'positive' });

    const key = tag('setfail');
    const f = await ingress(keel, `/StateObj/${key}/failAfterSet`, 'kept');
    t.equal(f.status, 400);
    t.equal(f.body.message, 'failed after setting kept');
    t.equal((await ingress(keel, `/StateObj/${key}/read`, 'v')).body, 'kept', 'state set before the terminal failure persists');

    const key2 = tag('eventual');
    const e = await ingress(keel, `/StateObj/${key2}/retryThenSucceed`, key2);
    t.equal(e.status, 200, JSON.stringify(e.body));
    t.equal(e.body, 3);
    t.equal((await ingress(keel, `/StateObj/${key2}/read`, 'attempt')).body, 3, 'the successful attempt wrote its state');
  });

  t.test('NonDeterminismErrors: a different command on replay -> RT0016, never completes', async (t) => {
    const handlers = ['eitherSleepOrCall', 'callDifferentMethod', 'backgroundInvokeWithDifferentTargets', 'setDifferentKey'];
    const ids = {};
    for (const h of handlers) {
      const key = tag(h);
      t.equal((await ingress(keel, `/StateObj/${key}/add`, 1)).body, 1);
      ids[h] = { key, id: await send(keel, `/NonDeterministic/${key}/${h}`) };
    }
    for (const h of handlers) {
      const { key, id } = ids[h];
      const row = await eventually(async () => {
        const x = await invocationRow(keel, id);
        return x.status === 'paused' && x;
      });
      t.equal(row.last_failure_error_code, 'RT0016', `${h}: journal mismatch`);
      t.equal(Number(row.retry_count), 5, `${h}: retried up to max attempts, then paused`);
      t.equal((await getInvocation(keel, id, 'output')).status, 470, `${h}: not completed`);
      t.equal((await ingress(keel, `/StateObj/${key}/get`)).body, 1, `${h}: the counter was not incremented`);
    }
    t.ok(logLinesWith(keel, 'RT0016').length >= handlers.length, 'RT0016 in the logs');
  });

  t.test('KillInvocation: kill a running invocation; the object is unlocked', async (t) => {
    const key = tag('killrun');
    const holder = await send(keel, `/LockObj/${key}/hold`, `${key}-hold`);
    await eventually(() => recorded(`${key}-hold`).length > 0);
    const queued = await send(keel, `/LockObj/${key}/quick`, `${key}-quick`);
    const k = await adminCall(keel, 'PATCH', `/invocations/${holder}/kill`);
    t.equal(k.status, 200, k.text);
    const out = await getInvocation(keel, holder);
    t.equal(out.status, 409);
    t.match(out.body.message, /killed/);
    const q = await getInvocation(keel, queued);
    t.equal(q.status, 200, JSON.stringify(q.body));
    t.same(recorded(`comp:${key}-hold`), [], 'no compensation on kill');
  });

  if (!crash) return;
  t.test('KillRuntime: a SIGKILL during a sleep; the sleep completes and state is kept', async (t) => {
    const key = tag('killrt');
    t.equal((await ingress(keel, `/StateObj/${key}/add`, 40)).body, 40);
    const tg = tag('sleepcrash');
    const id = await send(keel, '/Sleeper/sleepThenRecord', { tag: tg, ms: 1000 });
    await eventually(() => recorded(tg).length > 0);
    await crashAndRestart(keel);
    const out = await getInvocation(keel, id);
    t.equal(out.status, 200, JSON.stringify(out.body));
    t.ok(recorded(`woke:${tg}`)[0] - recorded(tg)[0] >= 995);
    t.equal((await ingress(keel, `/StateObj/${key}/add`, 2)).body, 42, 'state survived the crash');
  });
}
