// Cancellation and invocation management through a real Keel process with real SDK services:
// admin cancel/kill/purge/pause/resume/restart-as-new, ctx.cancel, propagation to child calls,
// object lock release on kill, retries exhausted -> paused, and the real restate CLI.
import t from 'tap';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startKeel, serveServices, register, ingress, eventually, tempDir } from './helpers/keel.mjs';
import { cancelServices } from './services/cancel-services.mjs';
import { recorded, tag, adminCall, getInvocation, invocationRow, query, broken, FAST_RETRY } from './services/invocation-helpers.mjs';

const CLI = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', '.bin', 'restate');

async function setup(t, env = {}) {
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '4', ...FAST_RETRY, ...env } });
  await register(keel, await serveServices(t, cancelServices));
  return keel;
}

async function send(keel, p, body) {
  const r = await ingress(keel, `${p}/send`, body);
  if (r.status !== 202) throw new Error(`send ${p}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.invocationId;
}

const published = (tg) => eventually(() => recorded(tg).length > 0 && recorded(tg)[0]);

async function childOf(keel, parentId) {
  return eventually(async () => {
    const rows = await query(keel, `select id from sys_invocation where invoked_by_id = '${parentId}'`);
    return rows.length === 1 && rows[0].id;
  });
}

t.test('admin cancel of an awaiting and of a sleeping handler: 409 canceled, compensation runs', async (t) => {
  const keel = await setup(t);
  const tg = tag('c1');
  const id = await send(keel, '/Blocker/block', tg);
  await published(tg);
  const c = await adminCall(keel, 'PATCH', `/invocations/${id}/cancel`);
  t.ok([200, 202].includes(c.status), `cancel: ${c.status} ${c.text}`);
  const out = await getInvocation(keel, id);
  t.equal(out.status, 409, JSON.stringify(out.body));
  t.match(out.body.message, /cancel/i);
  t.same(recorded(`comp:${tg}`), [{ name: 'CancelledError', code: 409, message: recorded(`comp:${tg}`)[0]?.message }]);
  t.same(recorded(`after:${tg}`), []);
  const row = await invocationRow(keel, id);
  t.equal(row.status, 'completed');
  t.equal(row.completion_result, 'failure');

  const tg2 = tag('c2');
  const id2 = await send(keel, '/Blocker/sleep', tg2);
  await published(tg2);
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${id2}/cancel`)).status, 202);
  const out2 = await getInvocation(keel, id2);
  t.equal(out2.status, 409);
  t.equal(recorded(`comp:${tg2}`).length, 1, 'the sleeping handler compensated');
  t.same(recorded(`after:${tg2}`), []);

  // The caller of a request-response ingress call gets the 409 too.
  const tg3 = tag('c3');
  const pending = ingress(keel, '/Blocker/block', tg3);
  await published(tg3);
  const id3 = await eventually(async () => {
    const rows = await query(keel, `select id from sys_invocation where target_handler_name = 'block' and status <> 'completed'`);
    return rows.length === 1 && rows[0].id;
  });
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${id3}/cancel`)).status, 202);
  const call = await pending;
  t.equal(call.status, 409, JSON.stringify(call.body));
  t.match(call.body.message, /cancel/i);
  t.equal(call.headers.get('x-restate-id'), id3);
});

t.test('cancellation propagates to a child call in progress', async (t) => {
  const keel = await setup(t);
  const tg = tag('prop');
  const id = await send(keel, '/Parent/callChild', tg);
  await published(`${tg}-child`);
  const child = await childOf(keel, id);
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${id}/cancel`)).status, 202);
  const out = await getInvocation(keel, id);
  t.equal(out.status, 409, JSON.stringify(out.body));
  const childOut = await getInvocation(keel, child);
  t.equal(childOut.status, 409, 'the child was canceled too');
  t.equal(recorded(`comp:${tg}-child`).length, 1, 'the child saw the cancellation and compensated');
  t.equal(recorded(`comp:${tg}`).length, 1, 'the parent compensated');
  t.equal(recorded(`comp:${tg}`)[0].code, 409);
});

t.test('ctx.cancel(id) and ctx.invocation(id).cancel() from a handler', async (t) => {
  const keel = await setup(t);
  for (const how of ['cancel', 'cancelViaRef']) {
    const tg = tag(how);
    const id = await send(keel, '/Blocker/block', tg);
    await published(tg);
    const r = await ingress(keel, `/Canceller/${how}`, id);
    t.equal(r.status, 200, JSON.stringify(r.body));
    const out = await getInvocation(keel, id);
    t.equal(out.status, 409, `${how}: ${JSON.stringify(out.body)}`);
    t.equal(recorded(`comp:${tg}`).length, 1, `${how}: compensation ran`);
  }
});

t.test('kill: ends at once with 409 killed, cascades to children, no compensation, releases the lock', async (t) => {
  const keel = await setup(t);
  const tg = tag('kill');
  const id = await send(keel, '/Parent/callChild', tg);
  await published(`${tg}-child`);
  const child = await childOf(keel, id);
  const k = await adminCall(keel, 'PATCH', `/invocations/${id}/kill`);
  t.equal(k.status, 200, k.text);
  const out = await getInvocation(keel, id);
  t.equal(out.status, 409);
  t.match(out.body.message, /killed/);
  const childOut = await getInvocation(keel, child);
  t.equal(childOut.status, 409, 'the child was killed too');
  t.match(childOut.body.message, /killed/);
  // The child's awakeable resolved later changes nothing.
  await fetch(`${keel.ingress}/restate/a/${recorded(`${tg}-child`)[0]}/resolve`, { method: 'POST', body: '"late"', headers: { 'content-type': 'application/json' } });
  await new Promise((r) => setTimeout(r, 200));
  t.same(recorded(`comp:${tg}`), [], 'no compensation on kill (parent)');
  t.same(recorded(`comp:${tg}-child`), [], 'no compensation on kill (child)');
  t.same(recorded(`after:${tg}-child`), [], 'the rest of the child never ran');

  // Object lock: a queued exclusive invocation on the same key runs once the holder is killed.
  const key = tag('lock');
  const holder = await send(keel, `/LockObj/${key}/hold`, `${key}-hold`);
  await published(`${key}-hold`);
  const queued = await send(keel, `/LockObj/${key}/quick`, `${key}-quick`);
  await eventually(async () => (await invocationRow(keel, queued))?.status === 'pending');
  t.same(recorded(`${key}-quick`), [], 'waits behind the lock');
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${holder}/kill`)).status, 200);
  const q = await getInvocation(keel, queued);
  t.equal(q.status, 200, JSON.stringify(q.body));
  t.equal(q.body, `quick ${key}-quick`);
  t.equal((await getInvocation(keel, holder)).status, 409);
  t.same(recorded(`after:${key}-hold`), []);
});

t.test('kill/cancel/purge of completed and running invocations', async (t) => {
  const keel = await setup(t);
  const r = await ingress(keel, '/Echo/echo', { tag: tag('done') });
  t.equal(r.status, 200);
  const done = r.headers.get('x-restate-id');
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${done}/kill`)).status, 409);
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${done}/cancel`)).status, 409);
  const tg = tag('running');
  const running = await send(keel, '/Blocker/block', tg);
  await published(tg);
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${running}/purge`)).status, 409, 'purge of a running invocation');
  t.equal((await getInvocation(keel, running, 'output')).status, 470);

  t.equal((await getInvocation(keel, done, 'output')).status, 200);
  const p = await adminCall(keel, 'PATCH', `/invocations/${done}/purge`);
  t.equal(p.status, 200, p.text);
  t.equal((await getInvocation(keel, done, 'output')).status, 404, 'purged: output gone');
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${done}/purge`)).status, 404, 'purged: id unknown');
  t.equal((await query(keel, `select id from sys_invocation where id = '${done}'`)).length, 0);
});

t.test('each refusal of a manage action answers its own code, with the status the catalogue gives it, and a warning', async (t) => {
  const keel = await setup(t);
  const refused = async (id, action, status, code, message) => {
    const r = await adminCall(keel, 'PATCH', `/invocations/${id}/${action}`);
    t.same([r.status, r.json], [status, { message: `[${code}] ${message}`, restate_code: code }], `${action}: ${status} ${code}`);
    const catalogued = await adminCall(keel, 'GET', `/errors/${code}`);
    t.equal(catalogued.json?.status, status, `${code} is catalogued with ${status}`);
  };
  const unknown = (await ingress(keel, '/Echo/echo', { tag: tag('unknown') })).headers.get('x-restate-id');
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${unknown}/purge`)).status, 200, 'purged: its id is now unknown');
  await refused(unknown, 'cancel', 404, 'KEEL0004', `The requested invocation '${unknown}' does not exist`);

  const done = (await ingress(keel, '/Echo/echo', { tag: tag('done') })).headers.get('x-restate-id');
  await refused(done, 'kill', 409, 'KEEL0008', `The invocation '${done}' was already completed.`);
  await refused(done, 'resume', 409, 'KEEL0008', `The invocation '${done}' was already completed.`);
  await refused(done, 'pause', 409, 'KEEL0008', `The invocation '${done}' is completed: only running invocations can be paused.`);

  const tg = tag('held');
  const holding = await send(keel, '/LockObj/k1/hold', tg);
  await published(tg);
  await refused(holding, 'purge', 409, 'KEEL0008', `The invocation '${holding}' is not completed.`);
  await refused(holding, 'restart-as-new', 409, 'KEEL0008', `The invocation '${holding}' is still running.`);
  const waiting = await send(keel, '/LockObj/k1/quick', tag('waiting'));
  await eventually(async () => (await query(keel, `select status from sys_invocation_status where id = '${waiting}'`))[0]?.status === 'inboxed');
  await refused(waiting, 'resume', 425, 'KEEL0017', `The invocation '${waiting}' has not started yet.`);

  const run = (await ingress(keel, '/Once/w1/run', 'x')).headers.get('x-restate-id');
  await refused(run, 'restart-as-new', 422, 'KEEL0018', `The invocation '${run}' is the run of workflow Once/w1: workflow runs cannot be restarted as new.`);
  for (const code of ['KEEL0004', 'KEEL0008', 'KEEL0017', 'KEEL0018']) {
    t.ok(keel.logLines(code).some((l) => l.level === 40 && l.msg === 'admin request failed'), `${code} logged as a warning`);
  }
  await adminCall(keel, 'PATCH', `/invocations/${holding}/kill`);
});

t.test('restart-as-new of an invocation whose journal retention ended: 410 KEEL0019, its input is gone', async (t) => {
  // Its idempotency key keeps its status a day (the default idempotency retention); its journal goes at once.
  const keel = await setup(t, { KEEL_DEFAULT_JOURNAL_RETENTION: '0s', KEEL_WORKER__CLEANUP_INTERVAL: '200ms' });
  const done = (await ingress(keel, '/Echo/echo', { tag: tag('gone') }, { 'idempotency-key': 'gone-1' })).headers.get('x-restate-id');
  await eventually(() => keel.output.includes('retention cleanup: expired invocations purged'), { timeout_ms: 10_000 });
  t.equal((await invocationRow(keel, done))?.status, 'completed', 'its status is kept');
  const r = await adminCall(keel, 'PATCH', `/invocations/${done}/restart-as-new`);
  t.same([r.status, r.json], [410, { message: `[KEEL0019] The input of '${done}' is gone (its journal retention ended).`, restate_code: 'KEEL0019' }]);
  t.equal((await adminCall(keel, 'GET', '/errors/KEEL0019')).json?.status, 410, 'the catalogue gives 410');
  t.ok(keel.logLines('KEEL0019').some((l) => l.level === 40 && l.msg === 'admin request failed'), 'KEEL0019 logged as a warning');
});

t.test('pause a retrying invocation, fix the handler, resume: it completes', async (t) => {
  const keel = await setup(t);
  const tg = tag('pause');
  broken.set(tg, true);
  const id = await send(keel, '/Flaky/run', tg);
  await eventually(async () => (await invocationRow(keel, id))?.retry_count >= 2);
  const p = await adminCall(keel, 'PATCH', `/invocations/${id}/pause`);
  t.ok([200, 202].includes(p.status), `pause: ${p.status} ${p.text}`);
  const row = await eventually(async () => {
    const x = await invocationRow(keel, id);
    return x.status === 'paused' && x;
  });
  t.match(row.last_failure, /still broken/);
  const n = recorded(`attempt:${tg}`).length;
  await new Promise((r) => setTimeout(r, 300));
  t.equal(recorded(`attempt:${tg}`).length, n, 'no attempts while paused');
  broken.set(tg, false);
  const res = await adminCall(keel, 'PATCH', `/invocations/${id}/resume`);
  t.equal(res.status, 200, res.text);
  const out = await getInvocation(keel, id);
  t.equal(out.status, 200, JSON.stringify(out.body));
  t.equal(out.body, `fixed ${tg}`);
  t.equal((await invocationRow(keel, id)).status, 'completed');
});

t.test('retries exhausted (max attempts 3) pause the invocation; resume after the fix completes it', async (t) => {
  const keel = await setup(t, { KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '3' });
  const tg = tag('exhaust');
  broken.set(tg, true);
  const id = await send(keel, '/Flaky/run', tg);
  const row = await eventually(async () => {
    const x = await invocationRow(keel, id);
    return x.status === 'paused' && x;
  });
  t.equal(Number(row.retry_count), 3);
  t.match(row.last_failure, /still broken/);
  t.equal(recorded(`attempt:${tg}`).length, 3, 'three attempts');
  broken.set(tg, false);
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${id}/resume`)).status, 200);
  const out = await getInvocation(keel, id);
  t.equal(out.status, 200, JSON.stringify(out.body));
  t.equal(out.body, `fixed ${tg}`);
});

t.test('restart-as-new of a completed invocation runs it again with the same input', async (t) => {
  const keel = await setup(t);
  const tg = tag('restart');
  const r = await ingress(keel, '/Echo/echo', { tag: tg, n: 5 });
  const first = r.headers.get('x-restate-id');
  const rs = await adminCall(keel, 'PATCH', `/invocations/${first}/restart-as-new`);
  t.equal(rs.status, 200, rs.text);
  t.match(rs.json, { new_invocation_id: /^inv_1/ });
  const second = rs.json.new_invocation_id;
  t.not(second, first);
  const out = await getInvocation(keel, second);
  t.equal(out.status, 200, JSON.stringify(out.body));
  t.same(out.body, { x: { tag: tg, n: 5 }, id: second });
  t.same(recorded(`echo:${tg}`), [first, second]);
  t.equal((await invocationRow(keel, second)).restarted_from, first);
  // Still running -> 409
  const tg2 = tag('restart-running');
  const running = await send(keel, '/Blocker/block', tg2);
  await published(tg2);
  t.equal((await adminCall(keel, 'PATCH', `/invocations/${running}/restart-as-new`)).status, 409);
});

t.test('the real restate CLI: invocations ls shows a suspended invocation; cancel and kill', async (t) => {
  const keel = await setup(t, { KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: '100ms' });
  const home = tempDir(t, 'keel-cli-home-');
  const cli = (...args) =>
    new Promise((resolve) => {
      execFile(
        CLI,
        args,
        {
          env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: keel.admin, RESTATE_CLI_CONFIG_HOME: home, NO_COLOR: '1', TERM: 'dumb' },
          timeout: 60_000,
        },
        (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) }),
      );
    });
  const tg = tag('cli-cancel');
  const a = await send(keel, '/Blocker/block', tg);
  await published(tg);
  await eventually(async () => (await invocationRow(keel, a))?.status === 'suspended');
  const ls = await cli('invocations', 'ls');
  t.equal(ls.code, 0, ls.out);
  t.match(ls.out, a, 'lists the invocation');
  t.match(ls.out, /suspended/i);
  const lsSusp = await cli('invocations', 'ls', '--status', 'suspended');
  t.equal(lsSusp.code, 0, lsSusp.out);
  t.match(lsSusp.out, a);

  const c = await cli('invocations', 'cancel', a, '--yes');
  t.equal(c.code, 0, c.out);
  const out = await getInvocation(keel, a);
  t.equal(out.status, 409);
  t.equal(recorded(`comp:${tg}`).length, 1, 'canceled via the CLI: compensation ran');

  const tg2 = tag('cli-kill');
  const b = await send(keel, '/Blocker/block', tg2);
  await published(tg2);
  const k = await cli('invocations', 'kill', b, '--yes');
  t.equal(k.code, 0, k.out);
  const outB = await getInvocation(keel, b);
  t.equal(outB.status, 409);
  t.match(outB.body.message, /killed/);
  t.same(recorded(`comp:${tg2}`), []);
});
