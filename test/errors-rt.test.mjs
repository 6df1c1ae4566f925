// RT codes created for real against a running Keel: a real SDK handler with an oversized
// answer (RT0003), hand-written endpoints that stall (RT0001), break the protocol (RT0012),
// answer 415 (RT0015) or 413 (RT0019), a deployment removed before its invocation ran
// (RT0011), and the registration-time notes RT0021/RT0022. After each, Keel keeps serving.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, eventually, query } from './helpers/keel.mjs';
import { rawEndpoint, encodeFrame, encode, pb, MessageType, outputAndEnd } from './services/raw-endpoint.mjs';

const fastRetry = {
  KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '100ms',
  KEEL_DEFAULT_RETRY_POLICY__MAX_INTERVAL: '300ms',
};

const alive = restate.service({ name: 'Alive', handlers: { ping: async (_ctx, s) => `pong ${s}` } });

async function invocationRow(keel, id) {
  const rows = await query(keel, `SELECT status, last_failure_error_code, last_failure FROM sys_invocation WHERE id = '${id}'`);
  return rows[0];
}

/** Keel still runs, still answers admin and ingress, and a real SDK service still works. */
async function stillServing(t, keel, tag) {
  t.equal(keel.proc.exitCode, null, `${tag}: Keel process still running`);
  const r = await ingress(keel, '/Alive/ping', tag);
  t.equal(r.status, 200, `${tag}: ${JSON.stringify(r.body)}`);
  t.equal(r.body, `pong ${tag}`);
  t.equal((await fetch(`${keel.admin}/health`)).status, 200);
}

async function keelWithAlive(t, env = {}) {
  const keel = await startKeel(t, { env: { ...fastRetry, ...env } });
  await register(keel, await serveServices(t, [alive]));
  return keel;
}

async function send(t, keel, path, body = null) {
  const r = await ingress(keel, `${path}/send`, body);
  t.equal(r.status, 202, JSON.stringify(r.body));
  return r.body.invocationId;
}

t.test('RT0003: a real SDK handler returning more than message_size_limit', async (t) => {
  const keel = await keelWithAlive(t, { KEEL_WORKER__INVOKER__MESSAGE_SIZE_LIMIT: '64KiB' });
  const big = restate.service({
    name: 'Big',
    handlers: {
      make: async (_ctx, kib) => 'x'.repeat(kib * 1024),
    },
  });
  await register(keel, await serveServices(t, [big]));
  // Under the limit it works.
  t.equal((await ingress(keel, '/Big/make', 8)).body.length, 8 * 1024);
  const id = await send(t, keel, '/Big/make', 100);
  await eventually(() => keel.logLines('RT0003').some((l) => l.invocation === id));
  const line = keel.logLines('RT0003').find((l) => l.invocation === id);
  t.match(line.msg, /65536|64/, 'the message names the limit');
  const row = await eventually(async () => {
    const r = await invocationRow(keel, id);
    return r?.last_failure_error_code === 'RT0003' && r;
  });
  t.not(row.status, 'completed', 'the invocation does not complete');
  await stillServing(t, keel, 'rt0003');
});

t.test('RT0001: an endpoint that answers 200 and then stays silent is aborted after inactivity + abort timeouts', async (t) => {
  const keel = await keelWithAlive(t, {
    KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: '200ms',
    KEEL_WORKER__INVOKER__ABORT_TIMEOUT: '300ms',
  });
  const ep = await rawEndpoint(t, {
    handlers: {
      silent: (_req, res, ctx) => {
        res.writeHead(200, { 'content-type': ctx.contentType });
        // headers only: no message ever, even after Keel closes its side
      },
    },
  });
  await register(keel, ep.uri);
  const started = Date.now();
  const id = await send(t, keel, '/Raw/silent');
  await eventually(() => keel.logLines('RT0001').some((l) => l.invocation === id));
  t.ok(Date.now() - started >= 450, 'not before inactivity (200 ms) + abort (300 ms) timeouts');
  t.equal((await eventually(() => invocationRow(keel, id).then((r) => r?.last_failure_error_code && r))).last_failure_error_code, 'RT0001');
  // The slot is freed and the attempt retried.
  await eventually(() => ep.calls.length >= 2);
  await stillServing(t, keel, 'rt0001');
});

t.test('RT0012: unexpected message type, undecodable message, wrong content type, bytes after End', async (t) => {
  const keel = await keelWithAlive(t);
  const ok200 = (res, ctx) => res.writeHead(200, { 'content-type': ctx.contentType });
  const ep = await rawEndpoint(t, {
    handlers: {
      unexpectedMessage: (_req, res, ctx) => {
        ok200(res, ctx);
        // A StartMessage travels only from Keel to the endpoint.
        res.write(encodeFrame(MessageType.Start, Buffer.alloc(0)));
      },
      badProto: (_req, res, ctx) => {
        ok200(res, ctx);
        res.write(encodeFrame(MessageType.Suspension, Buffer.from([0xff, 0xff, 0xff, 0xff])));
      },
      truncated: (_req, res, ctx) => {
        ok200(res, ctx);
        // A header announcing 100 bytes, then the stream ends after 3.
        const f = Buffer.alloc(11);
        f.writeUInt16BE(MessageType.OutputCommand, 0);
        f.writeUInt32BE(100, 4);
        res.end(f);
      },
      wrongContentType: (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('hello');
      },
      afterEnd: (_req, res, ctx) => {
        ok200(res, ctx);
        res.end(Buffer.concat([outputAndEnd('done'), encodeFrame(MessageType.OutputCommand, Buffer.alloc(0))]));
      },
    },
  });
  await register(keel, ep.uri);
  for (const h of ['unexpectedMessage', 'badProto', 'truncated', 'wrongContentType']) {
    const id = await send(t, keel, `/Raw/${h}`);
    const row = await eventually(() => invocationRow(keel, id).then((r) => r?.last_failure_error_code && r));
    t.equal(row.last_failure_error_code, 'RT0012', h);
    t.ok(keel.logLines(row.last_failure_error_code).some((l) => l.invocation === id), `${h} logged with its code`);
    t.not(row.status, 'completed', h);
    await stillServing(t, keel, h);
  }
  // Bytes after End: the invocation completes with its output, the extra message is reported.
  const r = await ingress(keel, '/Raw/afterEnd', null);
  t.equal(r.status, 200);
  t.equal(r.body, 'done');
  const id = r.headers.get('x-restate-id');
  await eventually(() => keel.logLines('RT0012').some((l) => l.invocation === id));
  await stillServing(t, keel, 'afterEnd');
});

t.test('RT0012 from the SDK (ErrorMessage code 571) and RT0017 entry preconditions (state on a Service, promises outside a workflow)', async (t) => {
  const keel = await keelWithAlive(t);
  const ok200 = (res, ctx) => res.writeHead(200, { 'content-type': ctx.contentType });
  const ep = await rawEndpoint(t, {
    handlers: {
      error571: (_req, res, ctx) => {
        ok200(res, ctx);
        res.end(encodeFrame(MessageType.Error, encode(pb.Error, { code: 571, message: 'the SDK saw a protocol violation' })));
      },
      stateOnService: (_req, res, ctx) => {
        ok200(res, ctx);
        res.write(encodeFrame(MessageType.SetStateCommand, encode(pb.SetState, { key: Buffer.from('k'), value: { content: Buffer.from('1') } })));
      },
      promiseOutsideWorkflow: (_req, res, ctx) => {
        ok200(res, ctx);
        res.write(encodeFrame(MessageType.GetPromiseCommand, encode(pb.GetPromise, { key: 'p', result_completion_id: 1 })));
      },
    },
  });
  await register(keel, ep.uri);
  for (const [h, code, text] of [
    ['error571', 'RT0012', /protocol violation/],
    ['stateOnService', 'RT0017', /state operations/],
    ['promiseOutsideWorkflow', 'RT0017', /durable promises/],
  ]) {
    const id = await send(t, keel, `/Raw/${h}`);
    const row = await eventually(() => invocationRow(keel, id).then((r) => r?.last_failure_error_code && r));
    t.equal(row.last_failure_error_code, code, h);
    t.match(row.last_failure, text, h);
    t.not(row.status, 'completed', h);
    t.ok(keel.logLines(code).some((l) => l.invocation === id), `${h} logged with ${code}`);
    // The refused entry is not journalled: the journal still holds only the input.
    const journal = await query(keel, `SELECT entry_type FROM sys_journal WHERE id = '${id}'`);
    t.same(journal.map((e) => e.entry_type), ['Command: Input'], `${h}: nothing recorded past the input`);
    await stillServing(t, keel, h);
  }
});

t.test('RT0015 (415) and RT0019 (413) answers of the endpoint', async (t) => {
  const keel = await keelWithAlive(t);
  const ep = await rawEndpoint(t, {
    handlers: {
      unsupported: (_req, res) => res.writeHead(415).end(),
      tooLarge: (_req, res) => res.writeHead(413).end('Payload Too Large'),
    },
  });
  await register(keel, ep.uri);
  for (const [h, code] of [['unsupported', 'RT0015'], ['tooLarge', 'RT0019']]) {
    const id = await send(t, keel, `/Raw/${h}`);
    await eventually(() => keel.logLines(code).some((l) => l.invocation === id));
    const row = await eventually(() => invocationRow(keel, id).then((r) => r?.last_failure_error_code && r));
    t.equal(row.last_failure_error_code, code, h);
    await stillServing(t, keel, h);
  }
});

t.test('RT0011: the deployment is removed (DELETE ?force=true) before a delayed invocation runs', async (t) => {
  const keel = await keelWithAlive(t);
  const ran = [];
  const gone = restate.service({ name: 'Gone', handlers: { run: async (_ctx, s) => (ran.push(s), s) } });
  const dep = await register(keel, await serveServices(t, [gone]));
  const r = await ingress(keel, '/Gone/run/send?delay=1s', 'later');
  t.equal(r.status, 202, JSON.stringify(r.body));
  const id = r.body.invocationId;
  const del = await fetch(`${keel.admin}/deployments/${dep.id}?force=true`, { method: 'DELETE' });
  t.equal(del.status, 202);
  await eventually(() => keel.logLines('RT0011').some((l) => l.invocation === id));
  const row = await eventually(() => invocationRow(keel, id).then((x) => x?.last_failure_error_code && x));
  t.equal(row.last_failure_error_code, 'RT0011');
  t.same(ran, [], 'the handler never ran');
  await stillServing(t, keel, 'rt0011');
});

t.test('RT0021 and RT0022: reported on the service at registration and logged with the code', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_MAX_JOURNAL_RETENTION: '1d' } });
  const opts = restate.service({
    name: 'Opts',
    handlers: { run: restate.handlers.handler({ inactivityTimeout: { seconds: 30 } }, async () => 'ok') },
    options: { inactivityTimeout: { minutes: 5 }, journalRetention: { days: 7 } },
  });
  // HTTP/1.1: request-response, the inactivity timeouts are ignored (RT0021); 7d > 1d (RT0022).
  const reg = await register(keel, await serveServices(t, [opts], { http1: true }), { use_http_11: true });
  const svc = await (await fetch(`${keel.admin}/services/Opts`)).json();
  t.same(svc.info.map((i) => i.code).sort(), ['RT0021', 'RT0021', 'RT0022']);
  t.match(svc.info.find((i) => i.code === 'RT0022').message, /7d.*1d.*clamped/);
  t.match(svc.info.filter((i) => i.code === 'RT0021').map((i) => i.message).join('\n'), /Opts\/run[\s\S]*HTTP\/1\.1|HTTP\/1\.1[\s\S]*Opts\/run/);
  t.equal(svc.journal_retention, '1d', 'clamped');
  t.same(reg.services[0].info, svc.info, 'the registration answer shows them too');
  // The log lines were written before the answer, but the pipe may deliver them after it.
  await eventually(() => keel.logLines('RT0021').length >= 2 && keel.logLines('RT0022').length >= 1);
  t.ok(keel.logLines('RT0021').length >= 2);
  const rt22 = keel.logLines('RT0022');
  t.equal(rt22.length, 1);
  t.equal(rt22[0].level, 40, 'RT0022 is a warning');
  t.equal(keel.logLines('RT0021')[0].level, 30, 'RT0021 is informational');
  // The clamped retention is what invocations get.
  t.equal((await ingress(keel, '/Opts/run', null)).body, 'ok');
  const rows = await query(keel, `SELECT journal_retention FROM sys_invocation WHERE target_service_name = 'Opts'`);
  t.ok(rows.length === 1 && (rows[0].journal_retention === null || rows[0].journal_retention <= 86_400_000), JSON.stringify(rows));
  // Re-registering the same endpoint is still idempotent.
  const again = await fetch(`${keel.admin}/deployments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ uri: (await (await fetch(`${keel.admin}/deployments/${reg.id}`)).json()).uri, use_http_11: true }),
  });
  t.equal(again.status, 200);

  // Over HTTP/2 (bidirectional) the inactivity timeout applies: no RT0021, only RT0022.
  const opts2 = restate.service({ name: 'Opts2', handlers: { run: async () => 'ok' }, options: { inactivityTimeout: { minutes: 5 }, journalRetention: { hours: 2 } } });
  await register(keel, await serveServices(t, [opts2]));
  const svc2 = await (await fetch(`${keel.admin}/services/Opts2`)).json();
  t.notOk('info' in svc2, JSON.stringify(svc2.info));
  t.equal(svc2.journal_retention, '2h');
});
