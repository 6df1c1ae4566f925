// GET /metrics on the admin port against a real Keel after real SDK invocations: the text parses
// as the Prometheus exposition format, counters move by what happened, histograms have samples,
// labels come from the registry and the catalogue.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, eventually, adminCall, query } from './helpers/keel.mjs';

const flakyAttempts = new Map();

const metered = restate.service({
  name: 'Metered',
  handlers: {
    ok: async (ctx, n) => {
      await ctx.run('step', () => n);
      return n;
    },
    // Fails its first attempt with a retryable error, then succeeds.
    flaky: restate.handlers.handler({ retryPolicy: { initialInterval: 10 } }, async (ctx, tag) => {
      const n = (flakyAttempts.get(tag) ?? 0) + 1;
      flakyAttempts.set(tag, n);
      if (n === 1) throw new Error('first attempt fails');
      return n;
    }),
    fail: async () => {
      throw new restate.TerminalError('no', { errorCode: 400 });
    },
    // Waits on an awakeable nobody completes: killed by the test.
    wait: async (ctx) => {
      await ctx.awakeable().promise;
      return 'unreachable';
    },
  },
});

/**
 * Parses the Prometheus text exposition strictly enough to fail on anything malformed: every
 * sample belongs to a family with # TYPE, names and labels have the allowed shape, values are numbers.
 */
function parseExposition(text) {
  const types = new Map();
  const samples = [];
  const problems = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (meta) {
      if (meta[1] === 'TYPE') types.set(meta[2], meta[3]);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) {
      problems.push(line);
      continue;
    }
    const labels = {};
    const rest = (m[2] ?? '').replace(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/g, (_all, k, v) => {
      labels[k] = v;
      return '';
    });
    const value = Number(m[3] === '+Inf' ? Infinity : m[3]);
    if (rest !== '' || Number.isNaN(value)) problems.push(line);
    const family = [m[1], m[1].replace(/_(bucket|sum|count)$/, '')].find((n) => types.has(n));
    if (family === undefined) problems.push(`no # TYPE for ${m[1]}`);
    samples.push({ name: m[1], family, labels, value });
  }
  return { types, samples, problems };
}

async function scrape(keel) {
  const res = await fetch(`${keel.admin}/metrics`);
  const text = await res.text();
  return { res, text, ...parseExposition(text) };
}

/** The value of the one sample called `name` whose labels include `labels` (undefined when absent). */
function value(m, name, labels = {}) {
  const found = m.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value;
}

const sum = (m, name, labels = {}) =>
  m.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);

t.test('/metrics after real invocations: counters, histograms, gauges, labels, format', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [metered]));

  for (const n of [1, 2, 3]) t.equal((await ingress(keel, '/Metered/ok', n)).status, 200);
  t.equal((await ingress(keel, '/Metered/flaky', 'a')).body, 2, 'the flaky handler succeeds on its second attempt');
  t.equal((await ingress(keel, '/Metered/fail', null)).status, 400);
  t.equal((await ingress(keel, '/Nope/x', null)).status, 404, 'an unknown service makes no label set');

  // A call that waits: in flight at the ingress, running at the invoker, until it is killed.
  const waiting = ingress(keel, '/Metered/wait', null);
  const during = await eventually(async () => {
    const m = await scrape(keel);
    return value(m, 'keel_ingress_requests_in_flight') === 1 && value(m, 'keel_invoker_attempts_running') >= 1 && m;
  });
  t.equal(sum(during, 'keel_invocations', { status: 'running' }), 1, 'one invocation is running');
  t.equal(value(during, 'keel_invoker_attempts_waiting'), 0);
  t.ok(value(during, 'keel_endpoint_http2_connections') >= 1, 'a pooled HTTP/2 connection to the endpoint');
  t.equal(value(during, 'keel_endpoint_http2_streams'), 1, 'carrying the waiting attempt');
  const [{ id }] = await query(keel, "SELECT id FROM sys_invocation WHERE target_handler_name = 'wait'");
  const kill = await adminCall(keel, 'PATCH', `/invocations/${id}/kill`);
  t.ok(kill.status < 300, `kill accepted: ${kill.status} ${kill.text}`);
  t.equal((await waiting).status, 409, 'the killed call answers 409');

  const m = await eventually(async () => {
    const m = await scrape(keel);
    return value(m, 'keel_invocations_completed_total', { handler: 'wait', outcome: 'killed' }) === 1 && value(m, 'keel_ingress_requests_in_flight') === 0 && m;
  });
  t.equal(m.res.status, 200);
  t.match(m.res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  t.same(m.problems, [], 'every line parses');

  // Every family is documented with # HELP/# TYPE and named keel_* (process metrics aside).
  const families = [...m.types.keys()].filter((n) => n.startsWith('keel_'));
  for (const f of ['keel_invocations_started_total', 'keel_invocations_completed_total', 'keel_attempts_total', 'keel_invocation_retries_total',
    'keel_attempt_duration_seconds', 'keel_invocation_duration_seconds', 'keel_journal_entries_appended_total', 'keel_log_batch_commands',
    'keel_log_batch_size_bytes', 'keel_log_write_duration_seconds', 'keel_store_write_duration_seconds', 'keel_errors_total', 'keel_ingress_requests_in_flight',
    'keel_invoker_attempts_waiting', 'keel_invoker_attempts_running', 'keel_partition_queued_commands', 'keel_outbox_entries',
    'keel_invocations', 'keel_store_size_bytes', 'keel_endpoint_http2_connections', 'keel_endpoint_http2_streams', 'keel_gc_pause_seconds']) {
    t.ok(families.includes(f), `${f} is exposed`);
  }
  t.equal(m.types.get('keel_attempt_duration_seconds'), 'histogram');
  t.equal(m.types.get('keel_invocations_started_total'), 'counter');
  t.ok(m.types.has('process_cpu_seconds_total') && m.types.has('nodejs_heap_size_used_bytes'), 'prom-client process metrics');
  // prom-client's gc metric takes only the first entry of each batch Node hands over; Keel's counts them all.
  const [gcKeel, gcProm] = [sum(m, 'keel_gc_pause_seconds_count'), sum(m, 'nodejs_gc_duration_seconds_count')];
  t.ok(gcKeel >= gcProm, `every GC pause counted (${gcKeel}; prom-client's ${gcProm}; test/bench-tail.test.mjs sees them under load)`);
  t.same([...new Set(m.samples.filter((x) => x.name === 'keel_gc_pause_seconds_count').map((x) => x.labels.kind))].sort(), ['incremental', 'major', 'minor', 'weakcb'], 'by kind');

  const ok = { service: 'Metered', handler: 'ok' };
  t.equal(value(m, 'keel_invocations_started_total', ok), 3);
  t.equal(value(m, 'keel_invocations_completed_total', { ...ok, outcome: 'succeeded' }), 3);
  t.equal(value(m, 'keel_invocations_completed_total', { ...ok, outcome: 'failed' }), 0);
  t.equal(value(m, 'keel_attempts_total', { ...ok, outcome: 'completed' }), 3);

  const flaky = { service: 'Metered', handler: 'flaky' };
  t.equal(value(m, 'keel_invocations_started_total', flaky), 1, 'a retry does not start the invocation again');
  t.equal(value(m, 'keel_invocation_retries_total', flaky), 1);
  t.equal(value(m, 'keel_attempts_total', { ...flaky, outcome: 'failed' }), 1);
  t.equal(value(m, 'keel_attempts_total', { ...flaky, outcome: 'completed' }), 1);
  t.equal(value(m, 'keel_invocations_completed_total', { ...flaky, outcome: 'succeeded' }), 1);

  t.equal(value(m, 'keel_invocations_completed_total', { service: 'Metered', handler: 'fail', outcome: 'failed' }), 1, 'a terminal error fails the invocation');
  t.equal(value(m, 'keel_attempts_total', { service: 'Metered', handler: 'wait', outcome: 'aborted' }), 1, 'the kill aborted the live attempt');
  t.ok(value(m, 'keel_errors_total', { code: 'RT0007' }) >= 1, 'the retryable failure is counted under its code');

  // Histograms: cumulative buckets ending at +Inf = _count, one observation per attempt / invocation.
  t.equal(value(m, 'keel_attempt_duration_seconds_count', ok), 3);
  t.equal(value(m, 'keel_invocation_duration_seconds_count', ok), 3);
  t.ok(value(m, 'keel_invocation_duration_seconds_sum', ok) > 0);
  const buckets = m.samples.filter((s) => s.name === 'keel_attempt_duration_seconds_bucket' && s.labels.handler === 'ok');
  t.ok(buckets.every((b, i) => i === 0 || b.value >= buckets[i - 1].value), 'buckets are cumulative');
  t.equal(buckets.at(-1).labels.le, '+Inf');
  t.equal(buckets.at(-1).value, 3);

  // Per partition: every batch is observed; journal entries of all invocations were appended.
  const batches = sum(m, 'keel_log_batch_commands_count');
  t.ok(batches > 0, `${batches} log batches observed`);
  t.equal(sum(m, 'keel_log_write_duration_seconds_count'), batches, 'one write per batch');
  // The store's group commits: each carries one or more partitions' batches, synced ones among them.
  const storeWrites = sum(m, 'keel_store_write_duration_seconds_count');
  t.ok(storeWrites > 0 && storeWrites <= batches, `${storeWrites} store writes for ${batches} batches`);
  t.ok(value(m, 'keel_store_write_duration_seconds_count', { synced: 'true' }) > 0, 'synced ones counted apart');
  t.ok(sum(m, 'keel_log_batch_commands_sum') >= batches);
  t.ok(sum(m, 'keel_log_batch_size_bytes_sum') > 0);
  t.ok(sum(m, 'keel_journal_entries_appended_total') >= 7 * 2, 'at least input and output entries of each invocation');
  t.ok(value(m, 'keel_store_size_bytes', { store: 'worker' }) > 0);
  t.ok(value(m, 'keel_store_size_bytes', { store: 'meta' }) > 0);
  t.equal(sum(m, 'keel_outbox_entries'), 0, 'nothing left to deliver');

  // Label sets come from the registry and the catalogue only.
  const services = new Set(m.samples.filter((s) => s.labels.service !== undefined).map((s) => s.labels.service));
  t.same([...services], ['Metered'], 'only registered services are labels');
  const codes = m.samples.filter((s) => s.name === 'keel_errors_total').map((s) => s.labels.code);
  t.ok(codes.every((c) => /^(META|RT|KEEL)\d{4}$/.test(c)), `error codes come from the catalogue: ${codes}`);
  t.same(new Set(m.samples.filter((s) => s.labels.partition !== undefined).map((s) => s.labels.partition)), new Set(['0', '1', '2', '3', '4', '5', '6', '7']));
});
