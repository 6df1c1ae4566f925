// Endpoint faults under load: an endpoint that hangs, answers slowly, resets streams half way,
// answers garbage, and a real SDK endpoint killed and restarted. Each fault is retried with its
// code (RT0001, RT0010, RT0012); once the endpoint behaves again every invocation completes,
// exactly once, and Keel keeps serving the other services all along.
import t from 'tap';
import http2 from 'node:http2';
import { randomBytes } from 'node:crypto';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, query, eventually, freePort } from './helpers/keel.mjs';
import { outputAndEnd } from './services/raw-endpoint.mjs';

const FAST = {
  KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms',
  KEEL_DEFAULT_RETRY_POLICY__MAX_INTERVAL: '300ms',
  KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: 'unlimited',
  KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: '200ms',
  KEEL_WORKER__INVOKER__ABORT_TIMEOUT: '400ms',
};

const alive = restate.service({ name: 'Alive', handlers: { ping: async (_ctx, x) => `pong ${x}` } });

/**
 * A hand-written endpoint whose behaviour can be switched while it runs: `ok` answers with the
 * invocation id; `hang` accepts and never answers; `slow` answers after 250 ms (under the abort
 * timeout: it must still succeed); `reset` sends half a frame and resets the stream; `garbage`
 * answers 200 with random bytes. `answered` counts the successful answers per invocation.
 */
async function faultyEndpoint(t) {
  const manifest = { protocolMode: 'BIDI_STREAM', minProtocolVersion: 5, maxProtocolVersion: 7, services: [{ name: 'Faulty', ty: 'SERVICE', handlers: [{ name: 'h' }] }] };
  const ep = { mode: 'ok', answered: new Map(), seen: new Map() };
  const server = http2.createServer();
  const sessions = new Set();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
    s.on('error', () => {});
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {});
    if (headers[':path'] === '/discover') {
      stream.respond({ ':status': 200, 'content-type': 'application/vnd.restate.endpointmanifest.v3+json' });
      return stream.end(JSON.stringify(manifest));
    }
    const id = headers['x-restate-invocation-id'];
    ep.seen.set(ep.mode, (ep.seen.get(ep.mode) ?? 0) + 1);
    const ct = headers['content-type'];
    const ok = () => {
      if (stream.closed) return;
      ep.answered.set(id, (ep.answered.get(id) ?? 0) + 1);
      stream.respond({ ':status': 200, 'content-type': ct });
      stream.end(outputAndEnd(id));
    };
    switch (ep.mode) {
      case 'ok':
        return ok();
      case 'hang':
        return stream.resume();
      case 'slow':
        return void setTimeout(ok, 250);
      case 'reset':
        stream.respond({ ':status': 200, 'content-type': ct });
        stream.write(outputAndEnd(id).subarray(0, 5));
        return void setTimeout(() => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR), 20);
      case 'garbage':
        stream.respond({ ':status': 200, 'content-type': ct });
        return stream.end(randomBytes(64));
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => {
    for (const s of sessions) s.destroy();
    server.close(() => resolve());
  }));
  ep.uri = `http://127.0.0.1:${server.address().port}/`;
  return ep;
}

const codesLogged = (keel) => {
  const codes = new Map();
  for (const line of keel.logs().split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const j = JSON.parse(line);
      if (j.code && j.level >= 40) codes.set(j.code, (codes.get(j.code) ?? 0) + 1);
    } catch {}
  }
  return codes;
};

t.test('hanging, slow, resetting and garbage-answering endpoint under load: retried, then each invocation completes once', async (t) => {
  const keel = await startKeel(t, { env: FAST });
  await register(keel, await serveServices(t, [alive]));
  const ep = await faultyEndpoint(t);
  await register(keel, ep.uri);

  const ids = [];
  const refused = [];
  const modes = ['hang', 'slow', 'reset', 'garbage', 'ok'];
  let pings = 0;
  for (let round = 0; round < 2 * modes.length; round++) {
    ep.mode = modes[round % modes.length];
    for (let i = 0; i < 20; i++) {
      const r = await ingress(keel, '/Faulty/h/send', null);
      if (r.status === 202) ids.push(r.body.invocationId);
      else refused.push(r.status);
    }
    // Other services are served whatever this endpoint does.
    const p = await ingress(keel, '/Alive/ping', round);
    if (p.status === 200 && p.body === `pong ${round}`) pings++;
    await new Promise((r) => setTimeout(r, 300));
  }
  t.same(refused, [], 'every send was accepted');
  t.equal(pings, 2 * modes.length, 'another service answered every time');
  ep.mode = 'ok';
  await eventually(async () => {
    const [row] = await query(keel, "SELECT count(*) AS open FROM sys_invocation WHERE target_service_name = 'Faulty' AND status != 'completed'");
    return Number(row.open) === 0;
  }, { timeout_ms: 30_000 });
  const rows = await query(keel, "SELECT id, completion_result FROM sys_invocation WHERE target_service_name = 'Faulty'");
  t.equal(rows.length, ids.length, `${ids.length} invocations`);
  t.equal(rows.filter((r) => r.completion_result === 'success').length, ids.length, 'all succeeded');
  t.same(ids.filter((id) => ep.answered.get(id) !== 1), [], 'each answered once: nothing completed twice');
  for (const mode of modes) t.ok((ep.seen.get(mode) ?? 0) > 0, `the endpoint was ${mode} for ${ep.seen.get(mode)} attempts`);
  const codes = codesLogged(keel);
  t.comment(`codes logged: ${JSON.stringify(Object.fromEntries(codes))}`);
  t.ok(codes.get('RT0001') > 0, 'a hang is RT0001');
  // Random bytes read as a frame header name a type and a length: an unknown message (RT0012) or
  // one over the size limit (RT0003); half a frame before a reset is RT0010 or RT0012.
  t.ok((codes.get('RT0012') ?? 0) + (codes.get('RT0003') ?? 0) > 0, 'garbage is RT0012 or RT0003');
  t.same([...codes.keys()].filter((c) => !['RT0001', 'RT0003', 'RT0010', 'RT0012'].includes(c)), [], 'and nothing else went wrong');
  t.equal((await fetch(`${keel.admin}/health`)).status, 200, 'every partition still runs');
});

t.test('a real SDK endpoint killed in the middle of the load and restarted on the same port', async (t) => {
  const keel = await startKeel(t, { env: FAST });
  const runs = new Map();
  const steps = restate.service({
    name: 'Steps',
    handlers: {
      go: async (ctx, i) => {
        const a = await ctx.run('one', () => {
          runs.set(`${i}/one`, (runs.get(`${i}/one`) ?? 0) + 1);
          return i;
        });
        await ctx.sleep({ milliseconds: 100 });
        return a * 2;
      },
    },
  });
  const port = await freePort();
  const handler = restate.createEndpointHandler({ services: [steps] });
  const listen = () => new Promise((resolve) => {
    const server = http2.createServer(handler);
    server.sessions = new Set();
    server.on('session', (s) => {
      server.sessions.add(s);
      s.on('close', () => server.sessions.delete(s));
    });
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
  const stop = (server) => new Promise((resolve) => {
    for (const s of server.sessions) s.destroy();
    server.close(() => resolve());
  });
  let server = await listen();
  t.teardown(() => stop(server));
  await register(keel, `http://127.0.0.1:${port}/`);
  await register(keel, await serveServices(t, [alive]));

  const N = 200;
  const ids = [];
  for (let i = 0; i < N; i++) ids.push((await ingress(keel, '/Steps/go/send', i)).body.invocationId);
  await new Promise((r) => setTimeout(r, 50));
  await stop(server);
  const during = await ingress(keel, '/Alive/ping', 'down');
  t.same([during.status, during.body], [200, 'pong down'], 'Keel serves the other services while one endpoint is down');
  await new Promise((r) => setTimeout(r, 1500));
  server = await listen();
  await eventually(async () => {
    const [row] = await query(keel, "SELECT count(*) AS done FROM sys_invocation WHERE target_service_name = 'Steps' AND status = 'completed'");
    return Number(row.done) === N;
  }, { timeout_ms: 30_000 });
  const results = await Promise.all(ids.map((id) => fetch(`${keel.ingress}/restate/invocation/${id}/output`).then((r) => r.json())));
  t.same(results, [...Array(N).keys()].map((i) => i * 2), 'every invocation has its own result');
  t.ok(keel.logLines('RT0010').length > 0, 'the outage was RT0010');
  t.same([...Array(N).keys()].filter((i) => !runs.has(`${i}/one`)), [], 'every step ran');
});
