// Protocol and journal codes created for real against a real Keel process, each followed by its
// remedy and a check that Keel keeps serving:
// - RT0013: a deployment (registered by an older server: its stored protocol range is [3, 4])
//   supports none of 5–7 -> an invocation accepted before (in flight) fails every attempt with
//   RT0013 (new requests get RT0020, see errors-rt0020); re-registering the endpoint fixes it.
// - RT0014: an invocation pinned to protocol v6 whose deployment now only supports v7 -> it cannot
//   be resumed; killing it is the way out, new invocations run on v7.
// - RT0018: a real SDK handler calling an unknown service -> RT0018 (transient), then registering
//   the service makes the invocation complete.
// - RT0016: the code behind a registered URI changes while an invocation sleeps -> journal
//   mismatch; fixed by updating the deployment in place to the original code, or by a kill.
import t from 'tap';
import http2 from 'node:http2';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import { ClassicLevel } from 'classic-level';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { invocationRow, getInvocation, adminCall, FAST_RETRY } from './services/invocation-helpers.mjs';
import { outputAndEnd } from './services/raw-endpoint.mjs';

const UNLIMITED = { ...FAST_RETRY, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: 'unlimited' };

const alive = restate.service({ name: 'Alive', handlers: { ping: async (_ctx, x) => `pong ${x}` } });

async function stillServing(t, keel, tag) {
  t.equal(keel.proc.exitCode, null, `${tag}: Keel process still running`);
  const r = await ingress(keel, '/Alive/ping', tag);
  t.equal(r.status, 200, `${tag}: ${JSON.stringify(r.body)}`);
  t.equal(r.body, `pong ${tag}`);
}

async function send(t, keel, p, body = null) {
  const r = await ingress(keel, `${p}/send`, body);
  t.equal(r.status, 202, JSON.stringify(r.body));
  return r.body.invocationId;
}

async function lastFailure(keel, id, code) {
  return eventually(async () => {
    const row = await invocationRow(keel, id);
    return row?.last_failure_error_code === code && row;
  });
}

/**
 * A hand-written endpoint whose manifest (protocol range included) can change between
 * discoveries; `answer(res, contentType)` answers each invocation. Returns { uri, manifest, calls }.
 */
async function versionedEndpoint(t, { service, min, max, answer }) {
  const manifest = {
    protocolMode: 'BIDI_STREAM',
    minProtocolVersion: min,
    maxProtocolVersion: max,
    services: [{ name: service, ty: 'SERVICE', handlers: [{ name: 'h' }] }],
  };
  const calls = [];
  const server = http2.createServer();
  const sessions = new Set();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  server.on('request', (req, res) => {
    req.on('error', () => {});
    res.on('error', () => {});
    if (req.url === '/discover') {
      res.writeHead(200, { 'content-type': 'application/vnd.restate.endpointmanifest.v3+json' });
      res.end(JSON.stringify(manifest));
      return;
    }
    if (req.url !== `/invoke/${service}/h`) {
      res.writeHead(404).end();
      return;
    }
    const contentType = req.headers['content-type'];
    calls.push(contentType);
    req.resume();
    // Bidirectional: Keel keeps its side open until the endpoint answers, so answer at once.
    answer.current(res, contentType);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise((resolve) => {
        for (const s of sessions) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { uri: `http://127.0.0.1:${server.address().port}/`, manifest, calls };
}

const succeed = (value) => (res, contentType) => {
  res.writeHead(200, { 'content-type': contentType });
  res.end(outputAndEnd(value));
};

t.test('RT0013: a deployment whose protocol range has nothing in 5–7; fixed by registering the endpoint again', async (t) => {
  const keel = await startKeel(t, { env: UNLIMITED });
  await register(keel, await serveServices(t, [alive]));
  const answer = { current: succeed('old ok') };
  const ep = await versionedEndpoint(t, { service: 'Old', min: 5, max: 7, answer });
  const dep = await register(keel, ep.uri);
  // The invocation is accepted while the deployment is current and is due after the restart:
  // once the deployment looks deprecated the ingress refuses new requests (RT0020), but an
  // invocation already accepted is in flight and must fail with RT0013.
  const accepted = await ingress(keel, '/Old/h/send?delay=1s', null);
  t.equal(accepted.status, 202, JSON.stringify(accepted.body));
  const id = accepted.body.invocationId;
  await keel.stop();

  // The meta storage now holds this deployment as an older server (protocol versions 3–4) wrote it.
  const db = new ClassicLevel(path.join(keel.dir, 'data', 'meta', 'log'), { keyEncoding: 'utf8', valueEncoding: 'utf8' });
  await db.open();
  const keys = await db.keys({ gte: 'r/', lt: 'r0' }).all();
  const last = keys[keys.length - 1];
  const added = (await db.values({ gte: 'r/', lt: 'r0' }).all()).map((v) => JSON.parse(v)).find((r) => r.deployment?.id === dep.id);
  const seq = Number(last.slice(2)) + 1;
  const old = { ...added.deployment, min_protocol_version: 3, max_protocol_version: 4 };
  await db.put(`r/${String(seq).padStart(16, '0')}`, JSON.stringify({ kind: 'deployment_updated', deployment: old }));
  await db.close();
  await keel.launch();

  await eventually(() => keel.logLines('RT0013', id).length >= 2, { timeout_ms: 10_000 });
  t.match(keel.logLines('RT0013', id)[0].msg, /supports none of the protocol versions 5-7/);
  const row = await lastFailure(keel, id, 'RT0013');
  t.not(row.status, 'completed');
  t.equal(ep.calls.length, 0, 'the endpoint was never called with a protocol it does not speak');
  await stillServing(t, keel, 'rt0013');

  // Remedy: register the (compatible) endpoint again; the invocation then completes.
  const again = await adminCall(keel, 'POST', '/deployments', { uri: ep.uri, force: true });
  t.ok(again.status < 300, again.text);
  const out = await eventually(async () => {
    const o = await getInvocation(keel, id, 'output');
    return o.status === 200 && o;
  });
  t.equal(out.body, 'old ok');
  t.match(ep.calls[0], /invocation\.v7$/);
  await stillServing(t, keel, 'rt0013-after');
});

t.test('RT0014: an invocation pinned to protocol v6 cannot resume on a deployment that now supports only v7; kill it', async (t) => {
  const keel = await startKeel(t, { env: UNLIMITED });
  await register(keel, await serveServices(t, [alive]));
  // The first attempt fails (500): the invocation is pinned to the deployment and to v6.
  const answer = { current: (res) => res.writeHead(500).end('not yet') };
  const ep = await versionedEndpoint(t, { service: 'Pinned', min: 5, max: 6, answer });
  const dep = await register(keel, ep.uri);
  const id = await send(t, keel, '/Pinned/h');
  await eventually(() => ep.calls.length >= 1);
  t.match(ep.calls[0], /invocation\.v6$/);
  const pinned = await eventually(async () => {
    const row = await invocationRow(keel, id);
    return row?.pinned_deployment_id && row;
  });
  t.equal(pinned.pinned_deployment_id, dep.id);

  // The SDK behind the URI is upgraded to one that only speaks v7, and it is force-registered
  // (same deployment id, new protocol range).
  ep.manifest.minProtocolVersion = 7;
  ep.manifest.maxProtocolVersion = 7;
  const re = await adminCall(keel, 'POST', '/deployments', { uri: ep.uri, force: true });
  t.ok(re.status < 300, re.text);
  t.equal(re.json.id, dep.id);

  await eventually(() => keel.logLines('RT0014', id).length >= 1);
  t.match(keel.logLines('RT0014', id)[0].msg, /protocol version 6/);
  await lastFailure(keel, id, 'RT0014');
  const callsAtRt0014 = ep.calls.length;
  await new Promise((r) => setTimeout(r, 300));
  t.equal(ep.calls.length, callsAtRt0014, 'no attempt reaches the endpoint with the unsupported version');
  // Only now does the endpoint succeed: had it earlier, a retry still on v6 (before the
  // re-registration landed) would have completed the invocation.
  answer.current = succeed('v7 ok');
  await stillServing(t, keel, 'rt0014');

  // Remedy: kill the invocation.
  const k = await adminCall(keel, 'PATCH', `/invocations/${id}/kill`);
  t.ok(k.status < 300, k.text);
  const out = await eventually(async () => {
    const o = await getInvocation(keel, id, 'output');
    return o.status !== 470 && o;
  });
  t.equal(out.status, 409);
  t.match(out.body.message, /killed/);
  // New invocations run on v7.
  const r = await ingress(keel, '/Pinned/h', null);
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.equal(r.body, 'v7 ok');
  t.match(ep.calls[ep.calls.length - 1], /invocation\.v7$/);
  await stillServing(t, keel, 'rt0014-after');
});

t.test('RT0018: a call to an unregistered service is transient; registering it lets the invocation complete', async (t) => {
  const keel = await startKeel(t, { env: UNLIMITED });
  const caller = restate.service({
    name: 'Caller',
    handlers: {
      callNope: async (ctx) => {
        const out = await ctx.genericCall({
          service: 'Nope',
          method: 'x',
          parameter: new Uint8Array([7]),
          inputSerde: restate.serde.binary,
          outputSerde: restate.serde.binary,
        });
        return Array.from(out);
      },
    },
  });
  await register(keel, await serveServices(t, [alive, caller]));
  const id = await send(t, keel, '/Caller/callNope');
  await eventually(() => keel.logLines('RT0018', id).length >= 2);
  t.match(keel.logLines('RT0018', id)[0].msg, /Nope/);
  const row = await lastFailure(keel, id, 'RT0018');
  t.not(row.status, 'completed');
  await stillServing(t, keel, 'rt0018');

  const nope = restate.service({
    name: 'Nope',
    handlers: {
      x: restate.handlers.handler({ input: restate.serde.binary, output: restate.serde.binary }, async (_ctx, input) =>
        Uint8Array.from([...input, 8, 9]),
      ),
    },
  });
  await register(keel, await serveServices(t, [nope]));
  const out = await eventually(async () => {
    const o = await getInvocation(keel, id, 'output');
    return o.status === 200 && o;
  });
  t.same(out.body, [7, 8, 9], 'the call reached the newly registered service and its result came back');
  await stillServing(t, keel, 'rt0018-after');
});

/** Serves SDK services over h2c on `port` (0: any); returns { uri, port, close() }. */
async function serveOn(t, services, port = 0) {
  const server = http2.createServer(restate.createEndpointHandler({ services }));
  const sessions = new Set();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  let closed = false;
  const close = () =>
    new Promise((resolve) => {
      if (closed) return resolve();
      closed = true;
      for (const s of sessions) s.destroy();
      server.close(() => resolve());
    });
  t.teardown(close);
  const p = server.address().port;
  return { uri: `http://127.0.0.1:${p}/`, port: p, close };
}

// Long enough that both are still asleep when the code is replaced, on a loaded machine too (the
// check that they suspended goes through the query engine, whose first query waits for it to start).
const SLEEP_MS = 4000;
const v1 = restate.service({
  name: 'Redeploy',
  handlers: {
    flow: async (ctx, tagName) => {
      const a = await ctx.run('a', () => 'A');
      await ctx.sleep(SLEEP_MS);
      const s = await ctx.run('step', () => 'S');
      return `${tagName}:${a}${s}`;
    },
  },
});
const v2 = restate.service({
  name: 'Redeploy',
  handlers: {
    flow: async (ctx, tagName) => {
      const b = await ctx.run('b', () => 'B');
      await ctx.sleep(SLEEP_MS);
      return `${tagName}:${b}`;
    },
  },
});

t.test('RT0016: code changed behind a registered URI; fixed by update in place, or by kill', async (t) => {
  const keel = await startKeel(t, { env: { ...UNLIMITED, KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: '100ms' } });
  await register(keel, (await serveOn(t, [alive])).uri);
  const first = await serveOn(t, [v1]);
  const dep = await register(keel, first.uri);
  const fixMe = await send(t, keel, '/Redeploy/flow', 'fix');
  const killMe = await send(t, keel, '/Redeploy/flow', 'kill');
  // Both ran 'a' and are sleeping (suspended) when the code behind the URI is replaced.
  await eventually(async () => {
    const rows = await Promise.all([invocationRow(keel, fixMe), invocationRow(keel, killMe)]);
    return rows.every((r) => r?.status === 'suspended');
  });
  await first.close();
  await serveOn(t, [v2], first.port);

  for (const id of [fixMe, killMe]) {
    await eventually(() => keel.logLines('RT0016', id).length >= 1, { timeout_ms: 15_000 });
    const row = await lastFailure(keel, id, 'RT0016');
    t.not(row.status, 'completed');
  }
  t.match(keel.logs(), /RT0016/);
  await stillServing(t, keel, 'rt0016');

  // Kill one: it ends with 409 killed, its partial progress dropped.
  const k = await adminCall(keel, 'PATCH', `/invocations/${killMe}/kill`);
  t.ok(k.status < 300, k.text);
  const killed = await eventually(async () => {
    const o = await getInvocation(keel, killMe, 'output');
    return o.status !== 470 && o;
  });
  t.equal(killed.status, 409);
  t.match(killed.body.message, /killed/);

  // Fix the other by updating the deployment in place to an endpoint running the original code
  // (same services, handlers and protocol versions, so META0016 allows it).
  const original = await serveOn(t, [v1]);
  const upd = await adminCall(keel, 'PUT', `/deployments/${dep.id}`, { uri: original.uri });
  t.equal(upd.status, 200, upd.text);
  const out = await eventually(async () => {
    const o = await getInvocation(keel, fixMe, 'output');
    return o.status === 200 && o;
  }, { timeout_ms: 15_000 });
  t.equal(out.body, 'fix:AS', 'the original journal was replayed and the invocation completed');
  await stillServing(t, keel, 'rt0016-after');
});
