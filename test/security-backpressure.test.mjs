// Endpoint back-pressure: an endpoint (or a proxy in front of it) answering 429 or 503 is
// retried as Restate 1.7 does (RT0023). With Retry-After (delta-seconds or an HTTP date) the
// next attempt waits that long and the attempt does not count against max_attempts; the wait
// shows on the invocation (next_retry_at, last failure RT0023).
import t from 'tap';
import http2 from 'node:http2';
import * as restate from '@restatedev/restate-sdk';
import { parseRetryAfter_ms } from '../dist/invoker/attempt.js';
import { retryAfter, MAX_RETRY_AFTER_MS } from '../dist/invoker/retry.js';
import { startKeel, register, ingress, query, eventually } from './helpers/keel.mjs';

/**
 * An SDK endpoint behind a proxy that pushes back: the first `refusals` invocation requests
 * are answered with `status` (and `retry-after` when `retryAfter()` gives one); discovery and
 * the rest go to the SDK. Records when each invocation request arrived.
 */
async function pushBackEndpoint(t, services, { refusals, status, retryAfter: ra }) {
  const inner = restate.createEndpointHandler({ services });
  const arrivals = [];
  let refused = 0;
  const server = http2.createServer((req, res) => {
    if (req.url.includes('/invoke/')) {
      arrivals.push(Date.now());
      if (refused < refusals) {
        refused += 1;
        const value = ra?.();
        res.writeHead(status, { 'content-type': 'text/plain', ...(value !== undefined ? { 'retry-after': value } : {}) });
        res.end('slow down');
        return;
      }
    }
    inner(req, res);
  });
  const sessions = new Set();
  server.on('session', (s) => (sessions.add(s), s.on('close', () => sessions.delete(s))));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => { for (const s of sessions) s.destroy(); server.close(() => r()); }));
  return { uri: `http://127.0.0.1:${server.address().port}/`, arrivals };
}

const greeter = restate.service({ name: 'Greeter', handlers: { greet: async (_ctx, name) => `hi ${name}` } });

async function invocation(keel, id) {
  const [row] = await query(keel, `SELECT status, retry_count, next_retry_at, last_failure_error_code, last_failure FROM sys_invocation WHERE id = '${id}'`);
  return row;
}

t.test('Retry-After: delta-seconds and HTTP dates; past, absent or unreadable values leave it to the policy', async (t) => {
  const now = Date.parse('2026-01-01T00:00:00Z');
  t.equal(parseRetryAfter_ms('3', now), 3000);
  t.equal(parseRetryAfter_ms(' 0 ', now), 0);
  t.equal(parseRetryAfter_ms('Thu, 01 Jan 2026 00:00:05 GMT', now), 5000);
  t.equal(parseRetryAfter_ms('Wed, 31 Dec 2025 23:59:00 GMT', now), undefined, 'in the past');
  for (const bad of [undefined, '', 'soon', '-1', '1.5', '99999999999999999999']) {
    t.equal(parseRetryAfter_ms(bad, now), undefined, JSON.stringify(bad));
  }
  const policy = { initial_interval_ms: 500, exponentiation_factor: 2, max_interval_ms: 60_000, max_attempts: 3, on_max_attempts: 'pause' };
  t.same(retryAfter(policy, 3000, now), { then: 0, retry_at_ms: now + 3000 });
  t.same(retryAfter(policy, 0, now), { then: 0, retry_at_ms: now + 500 }, 'never sooner than the initial interval');
  t.same(retryAfter(policy, 10 * 86_400_000, now), { then: 0, retry_at_ms: now + MAX_RETRY_AFTER_MS }, 'at most an hour');
});

t.test('429 with Retry-After: waits that long, costs no attempt (max_attempts 2, refused 3 times), shows RT0023 and next_retry_at', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '2', KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms' } });
  const ep = await pushBackEndpoint(t, [greeter], { refusals: 3, status: 429, retryAfter: () => '1' });
  await register(keel, ep.uri);
  const sent = await ingress(keel, '/Greeter/greet/send', 'patient');
  t.equal(sent.status, 202);
  const id = sent.body.invocationId;

  const waiting = await eventually(async () => {
    const r = await invocation(keel, id);
    return r?.status === 'backing-off' ? r : undefined;
  });
  t.equal(waiting.last_failure_error_code, 'RT0023');
  t.match(waiting.last_failure, /429 Too Many Requests, Retry-After 1 s/);
  t.equal(Number(waiting.retry_count), 0, 'the wait costs no attempt');
  const retryAt = Date.parse(waiting.next_retry_at);
  t.ok(retryAt > Date.now() - 1000 && retryAt <= Date.now() + 1000, `next_retry_at ${waiting.next_retry_at} is the endpoint's second`);

  const done = await fetch(`${keel.ingress}/restate/invocation/${id}/attach`);
  t.equal(done.status, 200, 'completed although it was refused more often than max_attempts');
  t.same(await done.json(), 'hi patient');
  t.equal(ep.arrivals.length, 4);
  for (let i = 1; i < ep.arrivals.length; i++) {
    t.ok(ep.arrivals[i] - ep.arrivals[i - 1] >= 950, `attempt ${i + 1} came ${ep.arrivals[i] - ep.arrivals[i - 1]} ms after the previous one (Retry-After: 1)`);
  }
  const lines = await eventually(() => (keel.logLines('RT0023', id).length >= 3 ? keel.logLines('RT0023', id) : undefined));
  t.ok(lines.length >= 3, 'each refusal is logged with RT0023');
  t.ok(lines.every((l) => l.level === 40), 'at warn: the endpoint pushing back is not a Keel fault');
});

t.test('503 with an HTTP-date Retry-After is honoured too', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms' } });
  const ep = await pushBackEndpoint(t, [greeter], { refusals: 1, status: 503, retryAfter: () => new Date(Date.now() + 2000).toUTCString() });
  await register(keel, ep.uri);
  const r = await ingress(keel, '/Greeter/greet', 'dated');
  t.equal(r.status, 200);
  t.same(r.body, 'hi dated');
  t.equal(ep.arrivals.length, 2);
  // An HTTP date has one-second resolution: the wait is at least one second.
  t.ok(ep.arrivals[1] - ep.arrivals[0] >= 1000, `retried ${ep.arrivals[1] - ep.arrivals[0]} ms later`);
});

t.test('429/503 without Retry-After are RT0023 retried by the policy, and count as attempts', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '2', KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms' } });
  const ep = await pushBackEndpoint(t, [greeter], { refusals: 10, status: 503 });
  await register(keel, ep.uri);
  const sent = await ingress(keel, '/Greeter/greet/send', 'refused');
  const id = sent.body.invocationId;
  const paused = await eventually(async () => {
    const r = await invocation(keel, id);
    return r?.status === 'paused' ? r : undefined;
  });
  t.equal(paused.last_failure_error_code, 'RT0023');
  t.match(paused.last_failure, /503 Service Unavailable/);
  t.equal(Number(paused.retry_count), 2, 'both attempts counted: paused after max_attempts');
  t.equal(ep.arrivals.length, 2);
});
