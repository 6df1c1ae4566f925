// The cross-SDK conformance suite: the behaviours Restate's own cross-SDK tests check, driven
// through Keel's ingress and admin APIs against one set of services (test/sdks/CONTRACT.md)
// written in each SDK. test/sdk-<sdk>.test.mjs runs it for one SDK; KEEL_BEHAVIOUR=<name>
// (comma-separated) runs only those behaviours, KEEL_CONFIG=<name> only that configuration.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { startKeel, register, ingress, eventually, tempDir, adminCall, query } from '../helpers/keel.mjs';
import { startEndpoint, SDKS } from '../helpers/sdks.mjs';
import { getInvocation, invocationRow, tag, FAST_RETRY, ALWAYS_SUSPEND, crashAndRestart } from '../services/invocation-helpers.mjs';
import { base58 } from '../../dist/endpoint/identity.js';

/** Restate's suite configurations. */
export const CONFIGS = {
  default: {},
  'always-suspending': ALWAYS_SUSPEND,
  'lazy-state': { KEEL_WORKER__INVOKER__DISABLE_EAGER_STATE: 'true' },
  'single-partition': { KEEL_WORKER__PARTITIONS: '1' },
  // One timer per partition in memory: the others are read from the store as it fires.
  'timers-on-disk': { KEEL_WORKER__NUM_TIMERS_IN_MEMORY_LIMIT: '1' },
  // Discovered over HTTP/1.1, the SDKs that serve it announce request-response: every suspension
  // point ends the request and the next attempt replays the journal.
  'http1.1': {},
};
const BASE_ENV = { KEEL_WORKER__PARTITIONS: '4', ...FAST_RETRY, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '5' };

async function call(c, p, body, headers) {
  return ingress(c.keel, p, body, headers);
}
async function ok(t, c, p, body, headers) {
  const r = await call(c, p, body, headers);
  t.equal(r.status, 200, `${p}: ${JSON.stringify(r.body)}`);
  return r.body;
}
async function send(c, p, body, headers) {
  const r = await ingress(c.keel, `${p}/send`, body, headers);
  if (r.status !== 202) throw new Error(`send ${p}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.invocationId;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const counterReq = (key, handler, input) => ({ service: 'Counter', key, handler, input });

/** The id an Awaiter handler put in AwakeableHolder/<key> (once it ran that far). */
async function heldId(c, key) {
  return eventually(async () => (await call(c, `/AwakeableHolder/${key}/get`)).body);
}
/**
 * Waits until the invocation's sleep is journaled: a run step's body has run once its line is
 * recorded, but only a journaled result keeps it from running again after a crash.
 */
async function sleeping(c, id) {
  await eventually(async () => {
    const rows = await query(c.keel, `SELECT entry_type FROM sys_journal WHERE id = '${id}'`);
    return rows.some((r) => r.entry_type === 'Command: Sleep');
  });
}
async function terminalOutcome(c, id) {
  const out = await getInvocation(c.keel, id);
  return { status: out.status, message: out.body?.message ?? '' };
}

// Each behaviour: the configurations it runs in ('*' = all) and its checks.
export const BEHAVIOURS = [
  ['state', '*', async (t, c) => {
    const key = tag('state');
    t.equal(await ok(t, c, `/Counter/${key}/get`), 0, 'unset state reads as the default');
    t.equal(await ok(t, c, `/Counter/${key}/add`, 2), 2);
    t.equal(await ok(t, c, `/Counter/${key}/add`, 5), 7, 'state read back and updated');
    await ok(t, c, `/Counter/${key}/set`, { key: 'b', value: { nested: [1, 'two'] } });
    await ok(t, c, `/Counter/${key}/set`, { key: 'a', value: 'x' });
    t.same(await ok(t, c, `/Counter/${key}/keys`), ['a', 'b', 'count'], 'list keys');
    t.same(await ok(t, c, `/Counter/${key}/read`, 'b'), { nested: [1, 'two'] });
    await ok(t, c, `/Counter/${key}/clear`, 'a');
    t.equal(await ok(t, c, `/Counter/${key}/read`, 'a'), null, 'clear');
    t.same(await ok(t, c, `/Counter/${key}/keys`), ['b', 'count']);
    await ok(t, c, `/Counter/${key}/clearAll`);
    t.same(await ok(t, c, `/Counter/${key}/keys`), [], 'clear all');
    t.equal(await ok(t, c, `/Counter/${key}/get`), 0);
    t.equal(await ok(t, c, `/Counter/${tag('other')}/get`), 0, 'keys are separate objects');
    // Lazy state: every read is a round trip to Keel (a GetLazyState command), none is answered
    // from the start message; eager: the reverse.
    const added = await call(c, `/Counter/${key}/add`, 1);
    const types = (await query(c.keel, `SELECT entry_type FROM sys_journal WHERE id = '${added.headers.get('x-restate-id')}'`)).map((r) => r.entry_type);
    const read = c.config === 'lazy-state' ? 'Command: GetLazyState' : 'Command: GetEagerState';
    t.ok(types.includes(read), `the read is journaled as ${read} (${types.join(', ')})`);
  }],
  ['state after failures', ['default', 'lazy-state'], async (t, c) => {
    const key = tag('fail');
    const r = await call(c, `/Counter/${key}/addThenFail`, 4);
    t.equal(r.status, 400, 'the terminal error code');
    t.equal(r.body.message, 'failed after add 4');
    t.equal(await ok(t, c, `/Counter/${key}/get`), 4, 'state set before a terminal error is kept');
    t.equal(await ok(t, c, `/Counter/${key}/failThenAdd`, 3), 7, 'retried until it succeeds');
    t.equal(await ok(t, c, `/Counter/${key}/get`), 7, 'only the successful attempt wrote state');
  }],
  ['calls', '*', async (t, c) => {
    const key = tag('call');
    t.equal(await ok(t, c, '/Proxy/call', counterReq(key, 'add', 3)), 3, 'a call returns the callee output');
    t.equal(await ok(t, c, '/Proxy/call', counterReq(key, 'add', 4)), 7);
    t.same(await ok(t, c, '/Proxy/call', counterReq(key, 'keys', null)), ['count'], 'a call to a shared handler');
    // No output: JSON null from some SDKs, an empty body from others (Go, Rust return unit as empty).
    const none = await ok(t, c, '/Proxy/call', { service: 'Sleeper', handler: 'sleep', input: { ms: 10 } });
    t.ok(none === null || none === '', `a call to a service, no output (${JSON.stringify(none)})`);
  }],
  ['one-way sends', '*', async (t, c) => {
    const key = tag('send');
    await ok(t, c, '/Proxy/send', counterReq(key, 'add', 5));
    await eventually(async () => (await call(c, `/Counter/${key}/get`)).body === 5);
    t.pass('the sent invocation ran');
  }],
  ['delayed sends', ['default', 'always-suspending', 'timers-on-disk'], async (t, c) => {
    const key = tag('delayed');
    const started = Date.now();
    await ok(t, c, '/Proxy/send', { ...counterReq(key, 'add', 1), delayMs: 1500 });
    await sleep(700);
    t.equal(await ok(t, c, `/Counter/${key}/get`), 0, 'not run before the delay');
    await eventually(async () => (await call(c, `/Counter/${key}/get`)).body === 1);
    t.ok(Date.now() - started >= 1450, `ran after the delay (${Date.now() - started} ms)`);
  }],
  ['idempotent calls and sends', ['default', 'single-partition'], async (t, c) => {
    const key = tag('idem');
    const h = { 'idempotency-key': tag('ik') };
    t.equal(await ok(t, c, `/Counter/${key}/add`, 1, h), 1);
    t.equal(await ok(t, c, `/Counter/${key}/add`, 1, h), 1, 'the same idempotency key answers the first result');
    const ik = tag('ik2');
    t.equal(await ok(t, c, '/Proxy/call', { ...counterReq(key, 'add', 10), idempotencyKey: ik }), 11);
    t.equal(await ok(t, c, '/Proxy/call', { ...counterReq(key, 'add', 10), idempotencyKey: ik }), 11, 'an idempotent call from a handler');
    const sk = tag('ik3');
    await ok(t, c, '/Proxy/send', { ...counterReq(key, 'add', 100), idempotencyKey: sk });
    await ok(t, c, '/Proxy/send', { ...counterReq(key, 'add', 100), idempotencyKey: sk });
    await eventually(async () => (await call(c, `/Counter/${key}/get`)).body === 111);
    await sleep(300);
    t.equal(await ok(t, c, `/Counter/${key}/get`), 111, 'an idempotent send ran once');
  }],
  ['call ordering', ['default', 'single-partition', 'always-suspending'], async (t, c) => {
    const key = tag('order');
    const reqs = Array.from({ length: 10 }, (_, i) => ({
      req: { service: 'ListObject', key, handler: 'append', input: String(i) },
      oneWay: i % 3 === 1,
    }));
    await ok(t, c, '/Proxy/manyCalls', reqs);
    await eventually(async () => (await call(c, `/ListObject/${key}/get`)).body.length === 10);
    t.same(await ok(t, c, `/ListObject/${key}/get`), reqs.map((_, i) => String(i)), 'calls and sends to one key run in the order issued');
  }],
  ['sleeps', ['default', 'always-suspending', 'http1.1', 'timers-on-disk'], async (t, c) => {
    const started = Date.now();
    await ok(t, c, '/Sleeper/sleepMany', [400, 100, 300, 200, 500]);
    const took = Date.now() - started;
    t.ok(took >= 495 && took < 2500, `five sleeps awaited together took ${took} ms`);
    const many = await Promise.all(Array.from({ length: 20 }, (_, i) => call(c, '/Sleeper/sleep', { ms: 200 + i * 10 })));
    t.same(many.map((r) => r.status), many.map(() => 200), '20 invocations sleeping at once all wake');
  }],
  ['sleep across failures', ['default', 'always-suspending', 'http1.1', 'timers-on-disk'], async (t, c) => {
    const tg = tag('sleepfail');
    const started = Date.now();
    const id = await send(c, '/Sleeper/sleep', { ms: 1500, tag: tg });
    await sleeping(c, id);
    await c.ep.restart();
    // A JVM takes longer to listen again than the suite's 5 quick attempts last: the invocation
    // is then paused (on_max_attempts), and an operator's resume goes on from the journal.
    const row = await invocationRow(c.keel, id);
    if (row.status === 'paused') {
      t.comment(`${c.sdk}: paused while the endpoint restarted (${row.retry_count} attempts); resumed`);
      t.equal((await adminCall(c.keel, 'PATCH', `/invocations/${id}/resume`)).status, 200, 'resume');
    }
    const out = await getInvocation(c.keel, id);
    t.equal(out.status, 200, JSON.stringify(out.body));
    t.ok(Date.now() - started >= 1450, 'the sleep was not cut short');
    t.equal(c.ep.recorded(`${tg}:before`).length, 1, 'the step before the sleep ran once across the endpoint SIGKILL');
    t.equal(c.ep.recorded(`${tg}:after`).length, 1);
  }],
  ['combinators', ['default', 'always-suspending', 'http1.1', 'timers-on-disk'], async (t, c) => {
    t.equal(await ok(t, c, '/Awaiter/awakeable', { key: tag('any'), timeoutMs: 200 }), 'timeout', 'any(awakeable, timer): the timer');
    const key = tag('any2');
    const id = await send(c, '/Awaiter/awakeable', { key, timeoutMs: 20_000 });
    const awk = await heldId(c, key);
    t.equal((await call(c, `/restate/awakeables/${awk}/resolve`, 'first')).status, 202);
    const first = await getInvocation(c.keel, id);
    t.same([first.status, first.body], [200, 'first'], 'any(awakeable, timer): the awakeable');
    t.equal(await ok(t, c, '/Awaiter/callOrTimeout', { sleepMs: 5000, timeoutMs: 100 }), 'timeout', 'any(call, timer): the timer');
    t.equal(await ok(t, c, '/Awaiter/callOrTimeout', { sleepMs: 10, timeoutMs: 10_000 }), 'call', 'any(call, timer): the call');
    const k3 = tag('all');
    const all = await send(c, '/Awaiter/all', { key: k3, sleepMs: 300 });
    const a3 = await heldId(c, k3);
    await call(c, `/restate/awakeables/${a3}/resolve`, 'v');
    t.equal((await getInvocation(c.keel, all)).body, 'v|1', 'all(awakeable, call, timer)');
  }],
  ['awakeables', ['default', 'always-suspending', 'http1.1'], async (t, c) => {
    const key = tag('awk');
    const id = await send(c, '/Awaiter/awakeable', { key });
    const awk = await heldId(c, key);
    t.equal((await call(c, `/restate/awakeables/${awk}/resolve`, 'hello')).status, 202, 'resolved through the ingress');
    t.equal((await getInvocation(c.keel, id)).body, 'hello');
    const k2 = tag('awkrej');
    const id2 = await send(c, '/Awaiter/awakeable', { key: k2 });
    const awk2 = await heldId(c, k2);
    t.equal((await call(c, `/restate/awakeables/${awk2}/reject`, 'nope', { 'content-type': 'text/plain' })).status, 202);
    const rej = await terminalOutcome(c, id2);
    t.ok(rej.status >= 400, `a rejected awakeable fails the invocation (${rej.status})`);
    t.match(rej.message, /nope/);
    const k3 = tag('awkh');
    const id3 = await send(c, '/Awaiter/awakeable', { key: k3 });
    await ok(t, c, '/Awaiter/resolve', { id: await heldId(c, k3), value: 'from a handler' });
    t.equal((await getInvocation(c.keel, id3)).body, 'from a handler', 'resolved from another handler');
  }],
  ['named signals', ['default', 'always-suspending', 'http1.1'], async (t, c) => {
    const id = await send(c, '/Signals/wait', { name: 'approved' });
    // The signal may arrive before the handler awaits it: Keel keeps it for the invocation.
    await ok(t, c, '/Signals/send', { id, name: 'approved', value: 'yes' });
    const out = await getInvocation(c.keel, id);
    t.same([out.status, out.body], [200, 'yes'], 'a signal resolved from another handler');
    const id2 = await send(c, '/Signals/wait', { name: 'approved' });
    await eventually(async () => (await invocationRow(c.keel, id2))?.status === (c.config === 'default' ? 'running' : 'suspended'));
    await ok(t, c, '/Signals/reject', { id: id2, name: 'approved', reason: 'denied' });
    const rej = await terminalOutcome(c, id2);
    t.ok(rej.status >= 400, `a rejected signal fails the invocation (${rej.status})`);
    t.match(rej.message, /denied/);
  }],
  ['cancellation', ['default', 'always-suspending'], async (t, c) => {
    const key = tag('cancel');
    const id = await send(c, '/Awaiter/awakeable', { key });
    await heldId(c, key);
    const r = await adminCall(c.keel, 'PATCH', `/invocations/${id}/cancel`);
    t.ok([200, 202].includes(r.status), `admin cancel: ${r.status} ${r.text}`);
    const out = await terminalOutcome(c, id);
    // The message is the SDK's: the TypeScript SDK says 'Cancelled', sdk-java 2.4 'Error 409'.
    t.equal(out.status, 409, `cancelled from the admin API (${out.message})`);
    const k2 = tag('cancel2');
    const id2 = await send(c, '/Awaiter/awakeable', { key: k2 });
    await heldId(c, k2);
    await ok(t, c, '/Proxy/cancel', id2);
    const out2 = await terminalOutcome(c, id2);
    t.equal(out2.status, 409, 'cancelled from a handler');
  }],
  ['kill', ['default'], async (t, c) => {
    const key = tag('kill');
    const id = await send(c, '/Awaiter/awakeable', { key });
    await heldId(c, key);
    const r = await adminCall(c.keel, 'PATCH', `/invocations/${id}/kill`);
    t.equal(r.status, 200, r.text);
    const out = await terminalOutcome(c, id);
    t.equal(out.status, 409);
    t.match(out.message, /killed/);
  }],
  ['terminal errors', ['default'], async (t, c) => {
    const req = { message: 'invalid order', code: 422, metadata: { field: 'qty', hint: 'positive' } };
    for (const [what, p, body] of [['thrown', '/Failing/terminal', req], ['propagated through a call', '/Proxy/call', { service: 'Failing', handler: 'terminal', input: req }]]) {
      const r = await call(c, p, body);
      t.equal(r.status, 422, `${what}: the code`);
      t.equal(r.body.message, 'invalid order', `${what}: the message`);
      if (c.cannot('terminal error metadata')) t.notOk(r.body.metadata, `${what}: no metadata (${c.cannot('terminal error metadata')})`);
      else t.same(r.body.metadata, req.metadata, `${what}: the metadata`);
    }
    const plain = await call(c, '/Failing/terminal', { message: 'plain' });
    t.equal(plain.status, 500, 'without a code: 500');
    t.equal(plain.body.message, 'plain');
  }],
  ['run retries', ['default', 'always-suspending', 'http1.1'], async (t, c) => {
    const tg = tag('retry');
    t.equal(await ok(t, c, '/Runner/retry', { tag: tg, failures: 2 }), 3, 'succeeds on the third try');
    t.equal(c.ep.recorded(`${tg}:run`).length, 3, 'the body ran three times, not again on the replay after it');
    const ex = tag('exhausted');
    const r = await call(c, '/Runner/exhausted', { tag: ex, maxAttempts: 2 });
    t.equal(r.status, 500, `attempts spent: a terminal error (${JSON.stringify(r.body)})`);
    t.match(r.body.message, /always fails/);
    t.equal(c.ep.recorded(`${ex}:run`).length, 2, 'max attempts 2: the body ran twice');
    const te = tag('term');
    const r2 = await call(c, '/Runner/terminal', { tag: te });
    t.equal(r2.body.message, 'terminal in run');
    if (!c.cannot('terminal error codes in runs')) t.equal(r2.status, 409);
    t.equal(c.ep.recorded(`${te}:run`).length, 1, 'a terminal error in a run is not retried');
  }],
  ['run flush', ['default', 'always-suspending'], async (t, c) => {
    for (let i = 0; i < 5; i++) {
      const n = await ok(t, c, '/Runner/countRuns', 3);
      if (c.config === 'default') t.equal(n, 3, 'every run body ran in the one attempt');
      else t.ok(n >= 0 && n <= 3, `the last attempt ran ${n} bodies, replaying the rest`);
    }
  }],
  ['non-determinism', ['default', 'always-suspending'], async (t, c) => {
    const handlers = ['eitherSleepOrCall', 'callDifferentMethod', 'sendDifferentTarget', 'setDifferentKey'];
    const ids = {};
    for (const h of handlers) {
      const key = tag(h);
      ids[h] = { key, id: await send(c, `/NonDeterministic/${key}/${h}`) };
    }
    for (const h of handlers) {
      const { key, id } = ids[h];
      const row = await eventually(async () => {
        const x = await invocationRow(c.keel, id);
        return x.status === 'paused' && x;
      }, { timeout_ms: 30_000 });
      t.equal(row.last_failure_error_code, 'RT0016', `${h}: journal mismatch`);
      t.equal(Number(row.retry_count), 5, `${h}: retried up to max attempts, then paused`);
      t.equal((await getInvocation(c.keel, id, 'output')).status, 470, `${h}: not completed`);
      t.equal(await ok(t, c, `/Counter/${key}/get`), 0, `${h}: nothing after the mismatch ran`);
    }
    t.ok(c.keel.logLines('RT0016').length >= handlers.length, 'RT0016 in the log');
  }],
  ['headers and raw bytes', ['default'], async (t, c) => {
    const seen = await ok(t, c, '/Echo/headers', undefined, { 'x-keel-test': 'passed through', 'x-other': 'two' });
    t.equal(seen['x-keel-test'], 'passed through', 'an ingress header reaches the handler');
    t.equal(seen['x-other'], 'two');
    const bytes = Buffer.from(Array.from({ length: 512 }, (_, i) => (i * 7) % 256));
    const res = await fetch(`${c.keel.ingress}/Echo/raw`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: bytes });
    t.equal(res.status, 200);
    t.ok(Buffer.from(await res.arrayBuffer()).equals(bytes), 'raw bytes in and out, unchanged');
  }],
  ['workflow', ['default', 'always-suspending', 'http1.1'], async (t, c) => {
    const wf = tag('wf');
    const r = await ingress(c.keel, `/Signup/${wf}/run/send`, 'ada');
    t.equal(r.status, 202, JSON.stringify(r.body));
    await eventually(async () => (await call(c, `/Signup/${wf}/status`)).body === 'waiting');
    const again = await ingress(c.keel, `/Signup/${wf}/run/send`, 'ada');
    t.equal(again.body.status, 'PreviouslyAccepted', 'a workflow runs once per id');
    await ok(t, c, `/Signup/${wf}/approve`, 'yes');
    const attach = await fetch(`${c.keel.ingress}/restate/workflow/Signup/${wf}/attach`);
    t.equal(attach.status, 200);
    t.equal(await attach.json(), 'ada:yes', 'attach gives the result');
    const output = await fetch(`${c.keel.ingress}/restate/workflow/Signup/${wf}/output`);
    t.equal(await output.json(), 'ada:yes', 'output gives the result');
    t.equal(await ok(t, c, `/Signup/${wf}/status`), 'approved', 'shared handlers read state after the run');
    t.equal(c.ep.recorded(`${wf}:create`).length, 1, 'the run step ran once');
  }],
  ['Keel killed mid-invocation', ['default', 'always-suspending', 'timers-on-disk'], async (t, c) => {
    const key = tag('crash');
    t.equal(await ok(t, c, `/Counter/${key}/add`, 40), 40);
    const tg = tag('sleepcrash');
    const id = await send(c, '/Sleeper/sleep', { ms: 1000, tag: tg });
    await sleeping(c, id);
    await crashAndRestart(c.keel);
    const out = await getInvocation(c.keel, id);
    t.equal(out.status, 200, JSON.stringify(out.body));
    t.equal(c.ep.recorded(`${tg}:before`).length, 1, 'the step before the SIGKILL did not run again');
    t.equal(await ok(t, c, `/Counter/${key}/add`, 2), 42, 'state survived');
  }],
  ['Keel stopped mid-invocation', ['default'], async (t, c) => {
    const tg = tag('sleepstop');
    const id = await send(c, '/Sleeper/sleep', { ms: 1000, tag: tg });
    await sleeping(c, id);
    await c.keel.stop();
    await crashAndRestart(c.keel);
    t.equal((await getInvocation(c.keel, id)).status, 200);
    t.equal(c.ep.recorded(`${tg}:before`).length, 1, 'a graceful stop and start: the step ran once');
  }],
];

function newIdentity(dir) {
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ed25519');
  const file = path.join(dir, 'identity.pem');
  fs.writeFileSync(file, privateKey.export({ format: 'pem', type: 'pkcs8' }));
  return { file, kid: `publickeyv1_${base58(Buffer.from(publicKey.export({ format: 'jwk' }).x, 'base64url'))}` };
}

/** Request signing: an endpoint that demands Keel's key serves Keel when it signs, refuses it unsigned. */
async function identity(t, sdk, unsignedKeel) {
  const key = newIdentity(tempDir(t));
  const ep = await startEndpoint(t, SDKS[sdk].dir, { env: { ...SDKS[sdk].env, IDENTITY_KEY: key.kid } });
  const unsigned = await fetch(`${unsignedKeel.admin}/deployments`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ uri: ep.uri }),
  });
  t.ok(unsigned.status >= 400, `unsigned discovery refused by the endpoint (${unsigned.status})`);
  const keel = await startKeel(t, { env: { ...BASE_ENV, KEEL_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE: key.file } });
  await register(keel, ep.uri);
  const k = tag('signed');
  t.equal((await ingress(keel, `/Counter/${k}/add`, 1)).body, 1, 'signed calls are served');
  t.equal((await ingress(keel, '/Proxy/call', counterReq(k, 'add', 1))).body, 2);
}

function wanted(name, envName) {
  const only = process.env[envName];
  return !only || only.split(',').includes(name);
}

/** Runs the suite for one SDK variant (a key of SDKS), every configuration in turn. */
export function conformance(t, sdk) {
  const spec = SDKS[sdk];
  const cannot = (what) => spec.unsupported?.[what];
  t.test(`${sdk}: the services build and start`, async (t) => {
    const ep = await startEndpoint(t, spec.dir, { env: spec.env ?? {} });
    for (const [config, env] of Object.entries(CONFIGS)) {
      if (!wanted(config, 'KEEL_CONFIG')) continue;
      if (config === 'http1.1' && !spec.http1) continue;
      await t.test(`${sdk} / ${config}`, async (t) => {
        const keel = await startKeel(t, { env: { ...BASE_ENV, ...env } });
        const reg = await register(keel, ep.uri, config === 'http1.1' ? { use_http_11: true } : {});
        const d = await adminCall(keel, 'GET', `/deployments/${reg.id}`);
        t.same([d.json.min_protocol_version, d.json.max_protocol_version], spec.protocol, 'the protocol versions the SDK announces');
        t.equal(d.json.protocol_type, config === 'http1.1' ? 'RequestResponse' : 'BidiStream', 'the protocol mode it announces');
        const c = { keel, ep, sdk, config, cannot };
        for (const [name, configs, check] of BEHAVIOURS) {
          if (configs !== '*' && !configs.includes(config)) continue;
          if (!wanted(name, 'KEEL_BEHAVIOUR')) continue;
          if (cannot(name)) {
            t.comment(`not applicable to ${sdk}: ${name} — ${cannot(name)}`);
            continue;
          }
          // A hang fails the behaviour (and says where) instead of the whole file.
          await t.test(name, { timeout: 90_000 }, (t) => check(t, c));
        }
        if (config === 'default' && wanted('request signing', 'KEEL_BEHAVIOUR')) await t.test('request signing', (t) => identity(t, sdk, keel));
      });
    }
  });
}
