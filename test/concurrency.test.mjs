// Hundreds of invocations in flight at once through a real Keel process: all complete with
// their own result, and every ctx.run body ran exactly once per invocation.
import t from 'tap';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { workService } from './services/core-services.mjs';

const N = 300;

async function runMany(t, keel, w, prefix) {
  const started = Date.now();
  const calls = [];
  for (let i = 0; i < N; i++) calls.push(ingress(keel, '/Work/doIt', { id: `${prefix}${i}`, n: i }));
  const results = await Promise.all(calls);
  const elapsed = Date.now() - started;
  const bad = results.map((r, i) => [i, r]).filter(([i, r]) => r.status !== 200 || r.body?.id !== `${prefix}${i}` || r.body?.doubled !== i * 2 || r.body?.token !== `t-${prefix}${i}`);
  t.same(bad.slice(0, 3).map(([i, r]) => ({ i, status: r.status, body: r.body })), [], 'every call answered 200 with its own result');
  const ids = new Set(results.map((r) => r.headers.get('x-restate-id')));
  t.equal(ids.size, N, 'distinct invocation ids');
  const counts = [...Array(N).keys()].map((i) => w.runs.get(`${prefix}${i}`) ?? 0);
  t.equal(counts.filter((c) => c === 1).length, N, 'each ctx.run executed exactly once');
  t.same(counts.filter((c) => c > 1), [], 'none twice');
  return elapsed;
}

t.test(`${N} invocations in flight at once`, async (t) => {
  const keel = await startKeel(t);
  const w = workService({ sleep_ms: 100 });
  await register(keel, await serveServices(t, [w.service]));
  const elapsed = await runMany(t, keel, w, 'a');
  // Sequentially this would take N x 100 ms of sleep alone.
  t.ok(elapsed < (N * 100) / 3, `ran concurrently (${elapsed} ms)`);

  // The same through /send, then watch the side effects.
  const sends = await Promise.all([...Array(N).keys()].map((i) => ingress(keel, '/Work/doIt/send', { id: `s${i}`, n: i })));
  t.equal(sends.filter((r) => r.status === 202).length, N);
  await eventually(() => [...Array(N).keys()].every((i) => w.runs.get(`s${i}`) === 1), { timeout_ms: 30_000 });
  // Give duplicates a chance to show up.
  await new Promise((r) => setTimeout(r, 500));
  t.equal([...Array(N).keys()].filter((i) => w.runs.get(`s${i}`) !== 1).length, 0, 'sent invocations ran once each');
});

t.test(`${N} invocations with concurrent_invocations_limit=10`, async (t) => {
  const keel = await startKeel(t, { env: { KEEL_WORKER__INVOKER__CONCURRENT_INVOCATIONS_LIMIT: '10' } });
  const w = workService({ sleep_ms: 20 });
  // Count handler bodies running at the same time at the endpoint.
  let live = 0;
  let maxLive = 0;
  const restate = await import('@restatedev/restate-sdk');
  const gauge = restate.service({
    name: 'Gauge',
    handlers: {
      hold: async (ctx, req) => {
        live += 1;
        maxLive = Math.max(maxLive, live);
        try {
          // No suspension point: the attempt stays open for the whole handler.
          await new Promise((r) => setTimeout(r, 30));
          return req.i;
        } finally {
          live -= 1;
        }
      },
    },
  });
  await register(keel, await serveServices(t, [w.service, gauge]));
  await runMany(t, keel, w, 'b');
  const held = await Promise.all([...Array(60).keys()].map((i) => ingress(keel, '/Gauge/hold', { i })));
  t.same(held.map((r) => r.body), [...Array(60).keys()], 'all gauge calls answered');
  t.ok(maxLive <= 10, `at most 10 attempts at once (saw ${maxLive})`);
  t.ok(maxLive >= 5, `but several at once (saw ${maxLive})`);
});
