// Invocation management and state routes of the admin API, and the real restate CLI against an
// admin server backed by a fake IntrospectionSource.
import t from 'tap';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createHash } from 'node:crypto';
import { startAdmin, newId } from './services/introspection-fake.mjs';
import { tempDir } from './services/meta-helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLI = path.join(here, '..', 'node_modules', '.bin', 'restate');

async function call(base, method, p, body) {
  const res = await fetch(base + p, {
    method,
    headers: body !== undefined ? { 'content-type': 'application/json' } : {},
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try { json = text ? JSON.parse(text) : undefined; } catch {}
  return { status: res.status, text, json };
}

t.test('PATCH /invocations/{id}/{action} and DELETE /invocations/{id}', async (t) => {
  const { base, source } = await startAdmin(t);
  const { ids } = source;
  const bad = await call(base, 'PATCH', '/v4/invocations/inv_notvalid/kill');
  t.equal(bad.status, 400);
  t.same(bad.json, { message: "[KEEL0003] The request field 'invocation_id' is invalid. Reason: bad format", restate_code: 'KEEL0003' });
  const unknown = newId();
  const nf = await call(base, 'PATCH', `/v4/invocations/${unknown}/purge`);
  t.equal(nf.status, 404);
  t.same(nf.json, { message: `[KEEL0004] The requested invocation '${unknown}' does not exist`, restate_code: 'KEEL0004' });
  const done = await call(base, 'PATCH', `/invocations/${ids.completed}/kill`);
  t.equal(done.status, 409);
  t.same(done.json, { message: `[KEEL0008] The invocation '${ids.completed}' was already completed.`, restate_code: 'KEEL0008' });
  t.equal((await call(base, 'PATCH', `/v4/invocations/${ids.running}/cancel`)).status, 202);
  t.equal((await call(base, 'PATCH', `/v3/invocations/${ids.running}/pause`)).status, 202);
  t.equal((await call(base, 'PATCH', `/v2/invocations/${ids.running}/resume`)).status, 200);
  const restart = await call(base, 'PATCH', `/v4/invocations/${ids.completed}/restart-as-new`);
  t.equal(restart.status, 200);
  t.match(restart.json, { new_invocation_id: /^inv_1/ });
  const kill = await call(base, 'PATCH', `/v4/invocations/${ids.backingOff}/kill`);
  t.equal(kill.status, 200);
  t.equal(kill.text, '');
  t.equal((await call(base, 'PATCH', `/v4/invocations/${ids.running}/nope`)).status, 404);
  t.equal((await call(base, 'DELETE', `/v4/invocations/${ids.failed}?mode=purge`)).status, 202);
  t.equal((await call(base, 'DELETE', `/v4/invocations/${ids.failed}?mode=purge`)).status, 404);
  t.equal((await call(base, 'DELETE', `/invocations/${ids.running}`)).status, 202);
  t.equal((await call(base, 'DELETE', `/invocations/${ids.running}?mode=explode`)).status, 400);
  t.equal((await call(base, 'DELETE', '/invocations/inv_1x')).status, 400);
  t.same(source.calls, [
    [unknown, 'purge'], [ids.completed, 'kill'], [ids.running, 'cancel'], [ids.running, 'pause'], [ids.running, 'resume'],
    [ids.completed, 'restart-as-new'], [ids.backingOff, 'kill'], [ids.failed, 'purge'], [ids.failed, 'purge'], [ids.running, 'cancel'],
  ]);
});

function version(entries) {
  const h = createHash('sha256');
  [...entries].sort(([a], [b]) => (a < b ? -1 : 1)).forEach(([k, v], i) => {
    const idx = Buffer.alloc(8);
    idx.writeBigUInt64BE(BigInt(i));
    h.update(idx).update(Buffer.from([1])).update(k).update(Buffer.from([2])).update(v).update(Buffer.from([3]));
  });
  return h.digest('base64url');
}

t.test('POST /services/{svc}/state', async (t) => {
  const { base, source } = await startAdmin(t);
  const svc = await call(base, 'POST', '/v4/services/Greeter/state', { object_key: 'x', new_state: {} });
  t.equal(svc.status, 400);
  t.same(svc.json, { message: '[KEEL0002] Cannot modify state for service type Service', restate_code: 'KEEL0002' });
  t.equal((await call(base, 'POST', '/v4/services/Nope/state', { object_key: 'x', new_state: {} })).status, 404);
  t.equal((await call(base, 'POST', '/v4/services/Counter/state', { new_state: {} })).status, 400);
  t.equal((await call(base, 'POST', '/v4/services/Counter/state', { object_key: 'c1', new_state: { a: [300] } })).status, 400);
  // stale version: 202, nothing applied
  const stale = await call(base, 'POST', '/v4/services/Counter/state', { version: 'nope', object_key: 'c1', new_state: { count: [52, 50] } });
  t.equal(stale.status, 202);
  t.equal(source.stateMap.get('Counter/c1').get('count').toString(), '5');
  // the version the CLI computes over the old state
  const v = version(source.stateMap.get('Counter/c1'));
  const ok = await call(base, 'POST', '/v4/services/Counter/state', { version: v, object_key: 'c1', new_state: { count: [52, 50], extra: [91, 49, 93] } });
  t.equal(ok.status, 202);
  t.equal(source.stateMap.get('Counter/c1').get('count').toString(), '42');
  t.equal(source.stateMap.get('Counter/c1').get('extra').toString(), '[1]');
  t.same(source.calls.at(-1), ['setState', 'Counter', 'c1', v]);
  const noVersion = await call(base, 'POST', '/services/Counter/state', { object_key: 'c3', new_state: { a: [49] } });
  t.equal(noVersion.status, 202);
  t.equal(source.stateMap.get('Counter/c3').get('a').toString(), '1');
});

t.test('the real restate CLI against the introspection routes', async (t) => {
  const { base, source } = await startAdmin(t);
  const { ids } = source;
  const home = tempDir(t, 'keel-cli-home-');
  const cli = (...args) => new Promise((resolve) => {
    execFile(CLI, args, {
      env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: base, RESTATE_CLI_CONFIG_HOME: home, CI: '1', NO_COLOR: '1', TERM: 'dumb' },
      timeout: 30_000,
    }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) });
    });
  });

  const ls = await cli('invocations', 'list');
  t.equal(ls.code, 0, ls.out);
  for (const id of [ids.running, ids.backingOff, ids.suspended, ids.inboxed, ids.scheduled]) t.match(ls.out, id);
  t.notMatch(ls.out, ids.completed);
  t.match(ls.out, /Showing 6\/6 invocations/);

  const all = await cli('invocations', 'list', '--all');
  t.equal(all.code, 0, all.out);
  t.match(all.out, ids.completed);

  const desc = await cli('invocations', 'describe', ids.running);
  t.equal(desc.code, 0, desc.out);
  t.match(desc.out, /Idempotency key:\s+idem-1/);
  t.match(desc.out, /Greeter\/greet/);
  t.match(desc.out, /Sleep/);

  const missing = await cli('invocations', 'describe', newId());
  t.not(missing.code, 0);
  t.match(missing.out, /not found/);

  const kill = await cli('invocations', 'kill', ids.backingOff, '--yes');
  t.equal(kill.code, 0, kill.out);
  t.match(kill.out, /Killed 1 invocations/);
  const cancel = await cli('invocations', 'cancel', ids.running, '--yes');
  t.equal(cancel.code, 0, cancel.out);
  t.match(cancel.out, /Cancelled 1 invocations/);
  t.same(source.calls, [[ids.backingOff, 'kill'], [ids.running, 'cancel']]);
  const none = await cli('invocations', 'kill', ids.completed, '--yes');
  t.not(none.code, 0);
  t.match(none.out, /No invocations found/);

  const sql = await cli('sql', 'select id, status from sys_invocation');
  t.equal(sql.code, 0, sql.out);
  t.match(sql.out, /8 rows/);
  t.match(sql.out, ids.suspended);
  const jsonl = await cli('sql', '--jsonl', 'select COUNT(*) AS n, MIN(created_at) AS oldest from sys_invocation');
  t.equal(jsonl.code, 0, jsonl.out);
  t.match(jsonl.out, /"n":8/);
  const sqlErr = await cli('sql', 'select nope from sys_invocation');
  t.not(sqlErr.code, 0);
  t.match(sqlErr.out, /nope/);

  const status = await cli('services', 'status');
  t.equal(status.code, 0, status.out);
  t.match(status.out, /Greeter/);
  t.match(status.out, /Counter/);
  const statusOne = await cli('services', 'status', 'Counter');
  t.equal(statusOne.code, 0, statusOne.out);
  t.match(statusOne.out, ids.suspended);

  const state = await cli('state', 'get', 'Counter', 'c1');
  t.equal(state.code, 0, state.out);
  t.match(state.out, /count\s+5/);
  t.match(state.out, /label\s+"hello"/);
  const plain = await cli('state', 'get', 'Counter', 'c1', '-p');
  t.equal(plain.code, 0, plain.out);
  t.match(plain.out, /"count":\s*5/);

  // state clear: the CLI computes the version over the state it read; it matches, so it applies
  const clear = await cli('state', 'clear', 'Counter/c1', '--yes');
  t.equal(clear.code, 0, clear.out);
  t.equal(source.stateMap.get('Counter/c1').size, 0);
});
