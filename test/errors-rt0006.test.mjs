// RT0006 against a real Keel: an attempt that cannot even start. The meta storage is edited so
// that a registered deployment's stored uri is no usable URL (`http://[bad`: the transport's
// `new URL` throws before any connection is tried). Every attempt fails with RT0006, recorded in
// the log and as the invocation's last failure; Keel keeps serving other services, the invoker
// slot is not leaked, and killing the invocation ends it.
import t from 'tap';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import { ClassicLevel } from 'classic-level';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { query, getInvocation, adminCall, FAST_RETRY } from './services/invocation-helpers.mjs';

const UNLIMITED = { ...FAST_RETRY, KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: 'unlimited' };
const BAD_URI = 'http://[bad';

const alive = restate.service({ name: 'Alive', handlers: { ping: async (_ctx, x) => `pong ${x}` } });
const broken = restate.service({ name: 'Broken', handlers: { h: async (_ctx, x) => `never ${x}` } });

async function stillServing(t, keel, tag) {
  t.equal(keel.proc.exitCode, null, `${tag}: Keel process still running`);
  const r = await ingress(keel, '/Alive/ping', tag);
  t.equal(r.status, 200, `${tag}: ${JSON.stringify(r.body)}`);
  t.equal(r.body, `pong ${tag}`);
}

async function failureRow(keel, id) {
  const rows = await query(keel, `select last_failure_error_code, last_failure, status, retry_count from sys_invocation where id = '${id}'`);
  return rows[0];
}

t.test('RT0006: a deployment whose stored uri is unusable; attempts fail with RT0006, Keel keeps serving, kill ends it', async (t) => {
  // Few invoker slots: if a failed start leaked its slot, Alive would stop being served.
  const keel = await startKeel(t, { env: { ...UNLIMITED, KEEL_WORKER__INVOKER__CONCURRENT_INVOCATIONS_LIMIT: '2' } });
  await register(keel, await serveServices(t, [alive]));
  const dep = await register(keel, await serveServices(t, [broken]));
  await keel.stop();

  const db = new ClassicLevel(path.join(keel.dir, 'data', 'meta', 'log'), { keyEncoding: 'utf8', valueEncoding: 'utf8' });
  await db.open();
  const keys = await db.keys({ gte: 'r/', lt: 'r0' }).all();
  const added = (await db.values({ gte: 'r/', lt: 'r0' }).all()).map((v) => JSON.parse(v)).find((r) => r.deployment?.id === dep.id);
  const seq = Number(keys[keys.length - 1].slice(2)) + 1;
  await db.put(`r/${String(seq).padStart(16, '0')}`, JSON.stringify({ kind: 'deployment_updated', deployment: { ...added.deployment, uri: BAD_URI } }));
  await db.close();
  await keel.launch();

  const listed = await adminCall(keel, 'GET', `/deployments/${dep.id}`);
  t.equal(listed.status, 200, listed.text);
  t.equal(listed.json.uri, BAD_URI, 'the deployment now holds the unusable uri');

  const sent = await ingress(keel, '/Broken/h/send', 'x');
  t.equal(sent.status, 202, JSON.stringify(sent.body));
  const id = sent.body.invocationId;

  // Several attempts, each failing with RT0006 (more than the invoker's 2 slots: none leaks).
  await eventually(() => keel.logLines('RT0006', id).length >= 4);
  t.match(keel.logLines('RT0006', id)[0].msg, /cannot start the attempt/);
  const row = await eventually(async () => {
    const r = await failureRow(keel, id);
    return r?.last_failure_error_code === 'RT0006' && r;
  });
  t.equal(row.last_failure_error_code, 'RT0006');
  t.match(row.last_failure, /^\[RT0006\] cannot start the attempt/);
  t.not(row.status, 'completed');
  t.ok(Number(row.retry_count) >= 1, `retried (${row.retry_count})`);
  for (let i = 0; i < 4; i++) await stillServing(t, keel, `rt0006-${i}`);

  const k = await adminCall(keel, 'PATCH', `/invocations/${id}/kill`);
  t.ok(k.status < 300, k.text);
  const out = await eventually(async () => {
    const o = await getInvocation(keel, id, 'output');
    return o.status !== 470 && o;
  });
  t.equal(out.status, 409);
  t.match(out.body.message, /killed/);
  const done = await failureRow(keel, id);
  t.equal(done?.status ?? 'completed', 'completed');
  const seen = keel.logLines('RT0006', id).length;
  await new Promise((r) => setTimeout(r, 300));
  t.equal(keel.logLines('RT0006', id).length, seen, 'no attempt after the kill');
  await stillServing(t, keel, 'rt0006-after');
});
