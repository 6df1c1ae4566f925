// OpenTelemetry traces from a real Keel: the caller's W3C traceparent continues into the spans
// Keel exports over OTLP (ingress request → invocation → each attempt → called invocations), the
// endpoint receives the attempt's traceparent on every invoke request (read by a real SDK
// service from its attempt headers), the trace survives suspensions and a crash, and
// sys_invocation.trace_id shows it. Without tracing.endpoint nothing of it happens.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, eventually, query, freePort } from './helpers/keel.mjs';
import { startOtlpReceiver, SpanKind } from './helpers/otlp.mjs';

/** What the endpoint saw on each attempt: the invocation, the handler, the traceparent header. */
const seen = [];
const record = (ctx, handler) => seen.push({ handler, id: ctx.request().id, traceparent: ctx.request().attemptHeaders.get('traceparent') });

const leaf = restate.service({
  name: 'Leaf',
  handlers: {
    echo: async (ctx, x) => {
      record(ctx, 'echo');
      return x;
    },
  },
});

const traced = restate.service({
  name: 'Traced',
  handlers: {
    // Calls Leaf, then sleeps long enough to be suspended (a second attempt resumes it).
    hop: restate.handlers.handler({ inactivityTimeout: 50 }, async (ctx, x) => {
      record(ctx, 'hop');
      const echoed = await ctx.serviceClient(leaf).echo(x);
      await ctx.sleep(300);
      return echoed;
    }),
    // Sleeps long enough for the test to restart Keel in the middle.
    nap: restate.handlers.handler({ inactivityTimeout: 50 }, async (ctx) => {
      record(ctx, 'nap');
      await ctx.sleep(2_000);
      return 'rested';
    }),
  },
});

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';
const hex = (n) => /^[0-9a-f]+$/.test(n);
const parse = (tp) => {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/.exec(tp ?? '');
  return m ? { traceId: m[1], spanId: m[2] } : undefined;
};

t.test('a traced call: traceparent to the endpoint, OTLP spans ingress → invocation → attempts → callee', async (t) => {
  const otlp = await startOtlpReceiver(t);
  const keel = await startKeel(t, { env: { KEEL_TRACING__ENDPOINT: otlp.url } });
  await register(keel, await serveServices(t, [traced, leaf]));

  const r = await ingress(keel, '/Traced/hop', 'x', { traceparent: `00-${TRACE}-${CALLER_SPAN}-01` });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.equal(r.body, 'x');
  const hopId = r.headers.get('x-restate-id');
  const hopSeen = seen.filter((s) => s.id === hopId);
  t.ok(hopSeen.length >= 2, `the hop suspended and resumed: ${hopSeen.length} attempts`);
  const hopAttempts = hopSeen.map((s) => parse(s.traceparent));
  t.ok(hopAttempts.every((a) => a?.traceId === TRACE), `every attempt got a traceparent in the caller's trace: ${hopSeen.map((s) => s.traceparent)}`);
  t.equal(new Set(hopAttempts.map((a) => a.spanId)).size, hopAttempts.length, 'one span per attempt');
  const leafSeen = seen.find((s) => s.handler === 'echo');
  t.equal(parse(leafSeen?.traceparent)?.traceId, TRACE, 'the called invocation is in the same trace');

  const rows = await query(keel, "SELECT id, target_handler_name, trace_id FROM sys_invocation ORDER BY target_handler_name");
  t.same(rows.map((row) => [row.target_handler_name, row.trace_id]), [['echo', TRACE], ['hop', TRACE]], 'sys_invocation.trace_id');

  const spans = await eventually(() => {
    const inTrace = otlp.spans.filter((s) => s.traceId === TRACE);
    const names = inTrace.map((s) => s.name);
    return names.includes('ingress Traced/hop') && names.filter((n) => n.startsWith('invocation ')).length === 2 && names.filter((n) => n.startsWith('attempt ')).length >= 3 && inTrace;
  });
  t.ok(otlp.requests.every((q) => q.path === '/v1/traces' && q.contentType === 'application/x-protobuf'), 'OTLP/HTTP protobuf on /v1/traces');
  t.ok(spans.every((s) => hex(s.spanId) && s.spanId.length === 16 && s.end_ms >= s.start_ms), 'well-formed spans');
  t.equal(spans[0].resource['service.name'], 'keel');

  const ingressSpan = spans.find((s) => s.name === 'ingress Traced/hop');
  t.ok(ingressSpan, 'the ingress request has a span');
  t.equal(ingressSpan.parentSpanId, CALLER_SPAN, "its parent is the caller's span");
  t.equal(ingressSpan.kind, SpanKind.SERVER);
  t.equal(ingressSpan.attributes['restate.invocation.id'], hopId);
  t.equal(ingressSpan.attributes['http.response.status_code'], 200);

  const hopSpan = spans.find((s) => s.name === 'invocation Traced/hop');
  t.equal(hopSpan.parentSpanId, ingressSpan.spanId, 'the invocation is a child of the ingress request');
  t.match(hopSpan.attributes, { 'restate.invocation.id': hopId, 'rpc.service': 'Traced', 'rpc.method': 'hop', 'restate.invocation.outcome': 'succeeded' });
  t.ok(hopSpan.start_ms <= ingressSpan.end_ms && hopSpan.end_ms >= hopSpan.start_ms + 300, 'it lasts from acceptance to completion, the sleep included');

  const hopAttemptSpans = spans.filter((s) => s.name === 'attempt Traced/hop');
  t.same(hopAttemptSpans.map((s) => s.spanId).sort(), hopAttempts.map((a) => a.spanId).sort(), 'the endpoint saw exactly the attempt spans');
  t.ok(hopAttemptSpans.every((s) => s.parentSpanId === hopSpan.spanId && s.kind === SpanKind.CLIENT), 'every attempt is a child of the invocation, across the suspension');
  t.same(hopAttemptSpans.map((s) => s.attributes['restate.invocation.epoch']).sort(), hopAttemptSpans.map((_, i) => i), 'epochs 0, 1, …');
  t.ok(hopAttemptSpans.some((s) => s.attributes['restate.attempt.outcome'] === 'suspended'));
  t.ok(hopAttemptSpans.some((s) => s.attributes['restate.attempt.outcome'] === 'completed'));

  const echoSpan = spans.find((s) => s.name === 'invocation Leaf/echo');
  const caller = hopAttemptSpans.find((s) => s.attributes['restate.invocation.epoch'] === 0);
  t.equal(echoSpan.parentSpanId, caller.spanId, 'the called invocation is a child of the attempt that called it');
  const echoAttempt = spans.find((s) => s.name === 'attempt Leaf/echo');
  t.equal(echoAttempt.parentSpanId, echoSpan.spanId);
  t.equal(echoAttempt.spanId, parse(leafSeen.traceparent).spanId, 'the callee endpoint saw its attempt span');
});

t.test('the trace survives a crash: attempts after a restart continue the same invocation span', async (t) => {
  const otlp = await startOtlpReceiver(t);
  const keel = await startKeel(t, { env: { KEEL_TRACING__ENDPOINT: otlp.url } });
  await register(keel, await serveServices(t, [traced, leaf]));

  // No traceparent from the caller: the ingress request starts the trace.
  const sent = await ingress(keel, '/Traced/nap/send', null);
  t.equal(sent.status, 202);
  const id = sent.body.invocationId;
  await eventually(async () => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${id}'`))[0]?.status === 'suspended');
  const [{ trace_id }] = await query(keel, `SELECT trace_id FROM sys_invocation WHERE id = '${id}'`);
  t.ok(hex(trace_id) && trace_id.length === 32, `a new trace: ${trace_id}`);
  // Spans not yet exported die with a SIGKILL: wait for the first attempt's before the crash.
  await eventually(() => otlp.spans.some((s) => s.traceId === trace_id && s.name === 'attempt Traced/nap'));

  await keel.restart();
  await eventually(async () => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${id}'`))[0]?.status === 'completed', { timeout_ms: 20_000 });
  const attempts = seen.filter((s) => s.id === id).map((s) => parse(s.traceparent));
  t.ok(attempts.length >= 2, `${attempts.length} attempts, before and after the restart`);
  t.ok(attempts.every((a) => a?.traceId === trace_id), 'every attempt, before and after the restart, is in the trace');

  const spans = await eventually(() => {
    const inTrace = otlp.spans.filter((s) => s.traceId === trace_id);
    return inTrace.some((s) => s.name === 'invocation Traced/nap') && inTrace;
  });
  const invocation = spans.find((s) => s.name === 'invocation Traced/nap');
  const ingressSpan = spans.find((s) => s.name === 'ingress Traced/nap');
  t.ok(ingressSpan, 'the ingress span was exported');
  t.equal(ingressSpan.parentSpanId, undefined, 'it is the root of the trace');
  t.equal(invocation.parentSpanId, ingressSpan.spanId);
  const after = spans.filter((s) => s.name === 'attempt Traced/nap' && attempts.at(-1).spanId === s.spanId);
  t.equal(after.length, 1, 'the attempt after the restart was exported');
  t.equal(after[0].parentSpanId, invocation.spanId, 'and its parent is the same invocation span');
});

t.test('without tracing.endpoint: no traceparent to the endpoint, no trace id', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [traced, leaf]));
  const r = await ingress(keel, '/Leaf/echo', 'quiet', { traceparent: `00-${TRACE}-${CALLER_SPAN}-01` });
  t.equal(r.status, 200);
  const id = r.headers.get('x-restate-id');
  t.same(seen.filter((s) => s.id === id).map((s) => s.traceparent), [undefined], 'the invoke request carries no traceparent');
  const rows = await query(keel, `SELECT trace_id FROM sys_invocation WHERE id = '${id}'`);
  t.equal(rows.length, 1);
  t.equal(rows[0].trace_id ?? null, null, 'no trace id (null columns are left out of JSON rows)');
});

t.test('an unreachable OTLP receiver: KEEL0601 is logged and counted, invocations are unaffected', async (t) => {
  const closedPort = await freePort();
  const keel = await startKeel(t, { env: { KEEL_TRACING__ENDPOINT: `http://127.0.0.1:${closedPort}` } });
  await register(keel, await serveServices(t, [traced, leaf]));
  for (const x of ['a', 'b']) t.equal((await ingress(keel, '/Leaf/echo', x)).body, x);
  // The exporter retries a refused export with backoff for a while before it gives up.
  const [line] = await eventually(() => keel.logLines('KEEL0601').length > 0 && keel.logLines('KEEL0601'), { timeout_ms: 60_000 });
  t.equal(line.level, 40, 'a warning');
  t.ok(line.dropped_spans >= 1, `${line.dropped_spans} spans dropped`);
  const metrics = await (await fetch(`${keel.admin}/metrics`)).text();
  t.match(metrics, /^keel_errors_total\{code="KEEL0601"\} 1$/m, 'counted once (failures are logged at most once a minute)');
});
