// The invoker against real SDK handlers: retries with journal replay, terminal errors,
// exhausted retries (kill and pause), journal mismatches and an endpoint that is down.
import t from 'tap';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { failingServices, controllableEndpoint } from './services/core-services.mjs';

const fastRetry = {
  KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms',
  KEEL_DEFAULT_RETRY_POLICY__MAX_INTERVAL: '400ms',
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

t.test('a retryable error twice, then success: the earlier ctx.run ran exactly once', async (t) => {
  const keel = await startKeel(t, { env: fastRetry });
  const f = failingServices();
  await register(keel, await serveServices(t, [f.service]));
  const r = await ingress(keel, '/Flaky/twiceThenOk', { id: 'r1' });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body, { ok: 'r1', step: 'step1-of-r1', attempt: 3 });
  t.equal(f.get('r1', 'attempts'), 3, 'three attempts');
  t.equal(f.get('r1', 'step1'), 1, 'step1 executed once; the retries replayed its result');
  const rt7 = keel.logLines('RT0007');
  t.equal(rt7.length, 2, 'each failed attempt logged as RT0007');
  t.ok(rt7.every((l) => l.invocation === r.headers.get('x-restate-id')), 'the lines name the invocation');
  t.match(rt7[0].msg, /transient failure 1 of r1/);
});

t.test('a terminal error completes the invocation with its code and message, no retry', async (t) => {
  const keel = await startKeel(t, { env: fastRetry });
  const f = failingServices();
  await register(keel, await serveServices(t, [f.service]));
  const r = await ingress(keel, '/Flaky/terminal', { id: 't1' });
  t.equal(r.status, 418);
  t.match(r.body, { code: 418, message: 'nope' });
  await sleep(300);
  t.equal(f.get('t1', 'attempts'), 1, 'not retried');
  t.equal(keel.logLines('RT0007').length, 0);
});

t.test('retries exhausted with on_max_attempts=kill: the call answers with the failure', async (t) => {
  const keel = await startKeel(t, {
    env: { ...fastRetry, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '3', KEEL_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS: 'kill' },
  });
  const f = failingServices();
  await register(keel, await serveServices(t, [f.service]));
  const r = await ingress(keel, '/Flaky/alwaysFails', { id: 'k1' });
  t.ok(r.status >= 500 && r.status <= 599, `5xx, got ${r.status}`);
  t.match(r.body.message, /always failing k1/);
  t.equal(f.get('k1', 'attempts'), 3);
  t.equal(f.get('k1', 'before'), 1, 'the recorded run was replayed, not re-executed');
  await sleep(500);
  t.equal(f.get('k1', 'attempts'), 3, 'no attempt after the kill');
});

t.test('retries exhausted with on_max_attempts=pause: paused, and still paused after a restart', async (t) => {
  const keel = await startKeel(t, {
    env: { ...fastRetry, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '3', KEEL_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS: 'pause' },
  });
  const f = failingServices();
  await register(keel, await serveServices(t, [f.service]));
  const sent = await ingress(keel, '/Flaky/alwaysFails/send', { id: 'p1' });
  t.equal(sent.status, 202);
  // A request-response call to the same handler with another id must not come back either.
  let answered = false;
  const call = ingress(keel, '/Flaky/alwaysFails', { id: 'p2' }).then((r) => ((answered = true), r)).catch(() => {});
  await eventually(() => f.get('p1', 'attempts') === 3 && f.get('p2', 'attempts') === 3);
  await sleep(1500);
  t.equal(f.get('p1', 'attempts'), 3, 'no fourth attempt');
  t.equal(f.get('p2', 'attempts'), 3);
  t.equal(answered, false, 'the paused invocation did not complete');
  t.equal(keel.logLines('RT0007').filter((l) => l.invocation === sent.body.invocationId).length, 3);
  await keel.restart();
  await call;
  await sleep(1500);
  t.equal(f.get('p1', 'attempts'), 3, 'the restart did not resume the paused invocation');
  t.equal(f.get('p2', 'attempts'), 3);
  t.equal(f.get('p1', 'before'), 1);
});

t.test('a handler whose code path changes between attempts: journal mismatch RT0016', async (t) => {
  const keel = await startKeel(t, {
    env: { ...fastRetry, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '3', KEEL_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS: 'kill' },
  });
  const f = failingServices();
  await register(keel, await serveServices(t, [f.service]));
  const r = await ingress(keel, '/Flaky/nondeterministic', { id: 'm1' });
  t.ok(r.status >= 500, `failed, got ${r.status} ${JSON.stringify(r.body)}`);
  t.equal(f.get('m1', 'a'), 1, 'the run of the first attempt is not executed again');
  const rt16 = keel.logLines('RT0016');
  t.ok(rt16.length >= 1, 'journal mismatch logged as RT0016');
  t.equal(rt16[0].invocation, r.headers.get('x-restate-id'));
  t.equal(keel.logLines('RT0007').length, 1, 'only the first attempt was an ordinary retryable error');
});

t.test('endpoint down: RT0010 and retries; back on the same port, the invocation completes', async (t) => {
  const keel = await startKeel(t, { env: fastRetry });
  const f = failingServices();
  const ep = await controllableEndpoint(t, [f.service]);
  await register(keel, ep.uri);
  const port = ep.port;
  await ep.close();
  const sent = await ingress(keel, '/Flaky/echo/send', { id: 'd1' });
  t.equal(sent.status, 202);
  await eventually(() => keel.logLines('RT0010').length >= 2);
  t.equal(f.get('d1', 'attempts'), 0);
  t.ok(keel.logLines('RT0010').every((l) => l.invocation === sent.body.invocationId));
  await ep.listen(port);
  t.equal(ep.port, port);
  await eventually(() => f.get('d1', 'run') === 1);
  // A second call after recovery completes normally, and the first did not run twice.
  const r = await ingress(keel, '/Flaky/echo', { id: 'd2' });
  t.same(r.body, { echo: 'd2' });
  await sleep(200);
  t.equal(f.get('d1', 'run'), 1);
  t.equal(f.get('d1', 'attempts'), 1);
});
