// How Keel keeps its connections to service endpoints, against real endpoints:
// - an endpoint that sends GOAWAY in the middle of the load and refuses streams: every
//   invocation completes exactly once, none is counted as a failed attempt, no RT0010;
// - messages near the size limit (input, state, step results of 10–30 MB) with the real SDK,
//   alone and while other invocations run on the same deployment: all complete;
// - thousands of invocations at concurrency 256 on the real SDK: each runs once, no RT0010.
import t from 'tap';
import http2 from 'node:http2';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, query, eventually } from './helpers/keel.mjs';
import { outputAndEnd } from './services/raw-endpoint.mjs';

const MiB = 1024 * 1024;

/** Runs `n` calls of `call(i)` with at most `concurrency` in flight; returns the results in order. */
async function closedLoop(n, concurrency, call) {
  const results = new Array(n);
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      results[i] = await call(i);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return results;
}

/**
 * Keel's log lines at error or warn level (pino levels 40 and up), each on one line of the
 * failure's diff (level, code, message, the error's message) so a CI log's excerpt shows them.
 */
function complaints(keel) {
  const out = [];
  for (const line of keel.logs().split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const j = JSON.parse(line);
      if (j.level >= 40) out.push(`${j.level} ${j.code ?? '-'} ${j.msg} ${JSON.stringify(j.err?.message ?? j.err ?? '')}`.slice(0, 300));
    } catch {}
  }
  return out;
}

/** Asserts Keel logged nothing at warn or error; the first such line is in the assertion's name. */
function noComplaints(t, keel) {
  const c = complaints(keel);
  t.same(c.slice(0, 3), [], `nothing logged at warn or error${c.length > 0 ? ` (${c.length}; first: ${c[0]})` : ''}`);
}

/**
 * A hand-written HTTP/2 endpoint (the SDK cannot be made to do this): every `goaway_every`
 * streams of a connection it sends GOAWAY naming the previous stream as the last one it
 * processed, leaving the current one unprocessed, and closes the connection soon after; every
 * `refuse_every`-th stream overall it resets with REFUSED_STREAM before reading it. The others
 * are answered with their invocation id. `processed` counts answers per invocation id.
 */
async function goawayEndpoint(t, { goaway_every, refuse_every }) {
  const manifest = {
    protocolMode: 'BIDI_STREAM',
    minProtocolVersion: 5,
    maxProtocolVersion: 7,
    services: [{ name: 'Edgy', ty: 'SERVICE', handlers: [{ name: 'h' }] }],
  };
  const processed = new Map();
  const stats = { streams: 0, refused: 0, goaways: 0, sessions: 0 };
  const server = http2.createServer();
  const sessions = new Set();
  server.on('session', (s) => {
    stats.sessions += 1;
    sessions.add(s);
    s.streamsSeen = 0;
    s.on('close', () => sessions.delete(s));
    s.on('error', () => {});
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {});
    if (headers[':path'] === '/discover') {
      stream.respond({ ':status': 200, 'content-type': 'application/vnd.restate.endpointmanifest.v3+json' });
      stream.end(JSON.stringify(manifest));
      return;
    }
    const session = stream.session;
    // Past its GOAWAY a server processes nothing above the last stream id it announced.
    if (session.lastStreamId !== undefined && stream.id > session.lastStreamId) return;
    stats.streams += 1;
    session.streamsSeen += 1;
    if (session.streamsSeen % goaway_every === 0) {
      session.lastStreamId = stream.id - 2;
      stats.goaways += 1;
      session.goaway(http2.constants.NGHTTP2_NO_ERROR, session.lastStreamId);
      setTimeout(() => session.destroy(), 200);
      return;
    }
    if (stats.streams % refuse_every === 0) {
      stats.refused += 1;
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      return;
    }
    const id = headers['x-restate-invocation-id'];
    processed.set(id, (processed.get(id) ?? 0) + 1);
    stream.respond({ ':status': 200, 'content-type': headers['content-type'] });
    stream.end(outputAndEnd(id));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise((resolve) => {
        for (const s of sessions) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { uri: `http://127.0.0.1:${server.address().port}/`, processed, stats };
}

t.test('GOAWAY mid-load and refused streams: every invocation completes once, none fails', async (t) => {
  const keel = await startKeel(t);
  const ep = await goawayEndpoint(t, { goaway_every: 60, refuse_every: 13 });
  await register(keel, ep.uri);
  const N = 1500;
  const results = await closedLoop(N, 100, async () => {
    const r = await ingress(keel, '/Edgy/h', null);
    return { status: r.status, body: r.body, id: r.headers.get('x-restate-id') };
  });
  const bad = results.filter((r) => r.status !== 200 || r.body !== r.id);
  t.same(bad.slice(0, 3), [], 'every call answered 200 with its own invocation id');
  t.ok(ep.stats.goaways >= 5, `the endpoint went away ${ep.stats.goaways} times`);
  t.ok(ep.stats.refused >= 50, `the endpoint refused ${ep.stats.refused} streams`);
  t.equal(ep.processed.size, N, 'every invocation reached the handler');
  t.same([...ep.processed.entries()].filter(([, n]) => n !== 1), [], 'none twice');
  const [row] = await query(keel, 'SELECT count(*) AS retried FROM sys_invocation WHERE retry_count > 0');
  t.equal(Number(row.retried), 0, 'no invocation was counted as a failed attempt');
  t.same(keel.logLines('RT0010'), [], 'no RT0010');
  noComplaints(t, keel);
});

const big = restate.service({
  name: 'Big',
  handlers: {
    /** The length of a big input. */
    size: async (_ctx, input) => input.length,
    /** A step whose result is `n` bytes. */
    step: async (ctx, n) => (await ctx.run('big', () => 'x'.repeat(n))).length,
  },
});
const bigState = restate.object({
  name: 'BigState',
  handlers: {
    put: async (ctx, n) => {
      ctx.set('blob', 'y'.repeat(n));
      return n;
    },
    size: async (ctx) => (await ctx.get('blob'))?.length ?? -1,
  },
});
const small = restate.service({ name: 'Small', handlers: { ping: async (_ctx, i) => i } });

t.test('messages of 10–30 MB complete, and the deployment keeps serving others meanwhile', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [big, bigState, small]));

  // Alone.
  const input = 'z'.repeat(20 * MiB);
  const alone = await ingress(keel, '/Big/size', input);
  t.same([alone.status, alone.body], [200, input.length], '20 MB input');

  // Together with small calls on the same deployment.
  const bigCalls = [
    ingress(keel, '/Big/size', 'w'.repeat(25 * MiB)),
    ingress(keel, '/Big/step', 30 * MiB),
    ingress(keel, '/BigState/k/put', 12 * MiB).then(async (r) => [r, await ingress(keel, '/BigState/k/size', null)]),
  ];
  let smallDone = 0;
  const smallCalls = closedLoop(200, 20, async (i) => {
    const r = await ingress(keel, '/Small/ping', i);
    smallDone += 1;
    return r.status === 200 && r.body === i;
  });
  const [sized, stepped, [put, got]] = await Promise.all(bigCalls);
  t.same([sized.status, sized.body], [200, 25 * MiB], '25 MB input');
  t.same([stepped.status, stepped.body], [200, 30 * MiB], '30 MB step result');
  t.same([put.status, got.status, got.body], [200, 200, 12 * MiB], '12 MB state, written then read');
  t.equal((await smallCalls).filter(Boolean).length, 200, `every small call answered (${smallDone})`);
  t.same(keel.logLines('RT0010'), [], 'no RT0010');
  noComplaints(t, keel);
});

t.test('3,000 invocations at concurrency 256 on the real SDK: each runs once, no RT0010', async (t) => {
  const keel = await startKeel(t);
  const runs = new Map();
  const counted = restate.service({
    name: 'Counted',
    handlers: {
      once: async (ctx, i) => {
        await ctx.run('count', () => runs.set(i, (runs.get(i) ?? 0) + 1));
        return i;
      },
    },
  });
  await register(keel, await serveServices(t, [counted]));
  const N = 3000;
  const results = await closedLoop(N, 256, async (i) => {
    const r = await ingress(keel, '/Counted/once', i);
    return r.status === 200 && r.body === i;
  });
  t.equal(results.filter(Boolean).length, N, 'every call answered with its own result');
  await eventually(() => runs.size === N);
  t.same([...runs.entries()].filter(([, n]) => n !== 1), [], 'every step ran exactly once');
  t.same(keel.logLines('RT0010'), [], 'no RT0010');
  noComplaints(t, keel);
});
