// RT0020 against a real Keel: a service whose latest deployment only speaks deprecated service
// protocol versions (metadata stored by an older server: protocol range [3, 4]) refuses new
// requests. The ingress answers 400 with [RT0020] and the remedy, and logs it at warn; a call from
// a handler is refused too, with RT0020 as the attempt's failure.
// Keel keeps serving other services, and registering the endpoint again (an upgraded SDK) lifts it.
import t from 'tap';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import { ClassicLevel } from 'classic-level';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { invocationRow, getInvocation, adminCall, FAST_RETRY } from './services/invocation-helpers.mjs';

const UNLIMITED = { ...FAST_RETRY, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: 'unlimited' };

const alive = restate.service({ name: 'Alive', handlers: { ping: async (_ctx, x) => `pong ${x}` } });
const old = restate.service({ name: 'Old', handlers: { h: async (_ctx, x) => `old ${x}` } });
const caller = restate.service({
  name: 'Caller',
  handlers: {
    callOld: async (ctx, x) => ctx.serviceClient(old).h(x),
  },
});

async function stillServing(t, keel, tag) {
  t.equal(keel.proc.exitCode, null, `${tag}: Keel process still running`);
  const r = await ingress(keel, '/Alive/ping', tag);
  t.equal(r.status, 200, `${tag}: ${JSON.stringify(r.body)}`);
  t.equal(r.body, `pong ${tag}`);
}

/** Rewrites deployment `id` in the stopped Keel's meta log as an older server stored it. */
async function storeAsOlderServer(keel, id, min, max) {
  const db = new ClassicLevel(path.join(keel.dir, 'data', 'meta', 'log'), { keyEncoding: 'utf8', valueEncoding: 'utf8' });
  await db.open();
  try {
    const keys = await db.keys({ gte: 'r/', lt: 'r0' }).all();
    const records = (await db.values({ gte: 'r/', lt: 'r0' }).all()).map((v) => JSON.parse(v));
    const added = records.find((r) => r.deployment?.id === id);
    const seq = Number(keys[keys.length - 1].slice(2)) + 1;
    const deployment = { ...added.deployment, min_protocol_version: min, max_protocol_version: max };
    await db.put(`r/${String(seq).padStart(16, '0')}`, JSON.stringify({ kind: 'deployment_updated', deployment }));
  } finally {
    await db.close();
  }
}

t.test('RT0020: new requests to a service on a deprecated protocol version are refused; Keel keeps serving', async (t) => {
  const keel = await startKeel(t, { env: UNLIMITED });
  await register(keel, await serveServices(t, [alive, caller]));
  const oldUri = await serveServices(t, [old]);
  const dep = await register(keel, oldUri);
  const before = await ingress(keel, '/Old/h', 'before');
  t.equal(before.status, 200, 'the service works while its deployment is current');
  await keel.stop();
  await storeAsOlderServer(keel, dep.id, 3, 4);
  await keel.launch();

  // A new call through the ingress.
  const call = await ingress(keel, '/Old/h', 'x');
  t.equal(call.status, 400, JSON.stringify(call.body));
  t.equal(call.body.code, 400);
  t.match(call.body.message, /^\[RT0020\]/);
  t.match(call.body.message, /deprecated service protocol version 4/);
  t.match(call.body.message, /register a new deployment with an upgraded SDK/);
  t.match(call.body.message, dep.id);

  // A new send (plain, /restate/send and delayed) is refused the same way: nothing is accepted.
  for (const p of ['/Old/h/send', '/restate/send/Old/h', '/Old/h/send?delay=1s']) {
    const send = await ingress(keel, p, 'y');
    t.equal(send.status, 400, `${p}: ${JSON.stringify(send.body)}`);
    t.match(send.body.message, /^\[RT0020\].*register a new deployment with an upgraded SDK/);
    t.notOk(send.body.invocationId, `${p}: no invocation was accepted`);
  }

  // Keel's log carries the code at warn level.
  const lines = await eventually(() => {
    const l = keel.logLines('RT0020');
    return l.length >= 4 && l;
  });
  t.equal(lines[0].level, 40, 'logged at warn');
  t.equal(lines[0].service, 'Old');
  t.match(lines[0].msg, /^\[RT0020\].*register a new deployment with an upgraded SDK/);
  await stillServing(t, keel, 'rt0020');

  // A call from a handler is a new request too: the attempt fails with RT0020, and the
  // invocation waits for the remedy.
  const viaCaller = await ingress(keel, '/Caller/callOld/send', 'z');
  t.equal(viaCaller.status, 202, JSON.stringify(viaCaller.body));
  const id = viaCaller.body.invocationId;
  const row = await eventually(async () => {
    const r = await invocationRow(keel, id);
    return r?.last_failure_error_code && r;
  });
  t.equal(row.last_failure_error_code, 'RT0020');
  t.match(row.last_failure, /RT0020.*register a new deployment with an upgraded SDK/);
  t.not(row.status, 'completed');
  t.match(keel.logs(), /"code":"RT0020"[^\n]*call to service 'Old'/);
  await stillServing(t, keel, 'rt0020-call');

  // Remedy: register the endpoint again (its SDK speaks 5+): new requests are accepted, and the
  // waiting call goes through.
  const again = await adminCall(keel, 'POST', '/deployments', { uri: oldUri, force: true });
  t.ok(again.status < 300, again.text);
  const after = await ingress(keel, '/Old/h', 'after');
  t.equal(after.status, 200, JSON.stringify(after.body));
  t.equal(after.body, 'old after');
  const out = await eventually(async () => {
    const o = await getInvocation(keel, id, 'output');
    return o.status === 200 && o;
  });
  t.equal(out.body, 'old z');
  await stillServing(t, keel, 'rt0020-after');
});
