// The query engine on a real Keel: the restate CLI's queries over live invocations, the limits
// (time, rows, bytes) and what past them answers, hostile SQL refused with a code, a status no
// timestamp can hold (a huge ?delay=), ingress answering while a heavy query runs, the engine
// coming back after it dies, and the PostgreSQL wire protocol (psql, pg) with and without a
// password.
import t from 'tap';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as restate from '@restatedev/restate-sdk';
import pg from 'pg';
import { tableFromIPC } from 'apache-arrow';
import { eventually, ingress, query, register, serveServices, startKeel, tempDir } from './helpers/keel.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLI = path.join(here, '..', 'node_modules', '.bin', 'restate');

const Echo = restate.service({
  name: 'Echo',
  handlers: {
    echo: async (ctx, v) => ctx.run('step', () => v),
    nap: async (ctx) => {
      await ctx.sleep(3_600_000);
      return 'rested';
    },
    // A delayed send from a handler: the service protocol carries any u64 time, and a delay of
    // 1e16 ms lands past what a JavaScript Date or a timestamp column holds.
    poison: async (ctx) => {
      const handle = ctx.genericSend({ service: 'Echo', method: 'echo', parameter: Buffer.from(JSON.stringify('later')), delay: 1e16 });
      return await handle.invocationId;
    },
  },
});

async function post(keel, sql, { json = true } = {}) {
  const res = await fetch(`${keel.admin}/v4/query`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: json ? 'application/json' : '*/*' },
    body: JSON.stringify({ query: sql }),
  });
  const buf = Buffer.from(await res.arrayBuffer());
  const ct = res.headers.get('content-type') ?? '';
  if (ct.includes('arrow')) return { status: res.status, table: tableFromIPC(buf) };
  return { status: res.status, body: JSON.parse(buf.toString()) };
}

function restateCli(t, keel) {
  const home = tempDir(t, 'keel-cli-home-');
  return (...args) =>
    new Promise((resolve) => {
      execFile(CLI, args, {
        env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: keel.admin, RESTATE_CLI_CONFIG_HOME: home, CI: '1', NO_COLOR: '1', TERM: 'dumb' },
        timeout: 60_000,
      }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) }));
    });
}

function psql(keel, args, env = {}) {
  return new Promise((resolve) => {
    execFile('psql', ['-h', keel.pgsql.host, '-p', String(keel.pgsql.port), '-U', 'keel', '-d', 'keel', '-X', '-v', 'ON_ERROR_STOP=1', ...args], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, PGCONNECT_TIMEOUT: '10', PGSSLMODE: 'prefer', ...env },
      timeout: 60_000,
    }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout), err: String(stderr) }));
  });
}

/** The query engine's process: the child of Keel running engine-main.js. */
function enginePid(keel) {
  for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === keel.proc.pid && fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('engine-main.js')) return Number(pid);
    } catch {}
  }
  return undefined;
}

t.test('the restate CLI over live invocations: ls, describe, sql, services status, kill', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: '200ms' } });
  await register(keel, await serveServices(t, [Echo]));
  for (const v of ['a', 'b', 'c']) t.equal((await ingress(keel, '/Echo/echo', v)).body, v);
  const sent = await ingress(keel, '/Echo/nap/send', null);
  t.equal(sent.status, 202);
  const napping = sent.body.invocationId;
  await eventually(async () => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${napping}'`))[0]?.status === 'suspended');
  const cli = restateCli(t, keel);

  const ls = await cli('invocations', 'list');
  t.equal(ls.code, 0, ls.out);
  t.match(ls.out, napping);
  t.match(ls.out, /Showing 1\/1 invocations/);
  const all = await cli('invocations', 'list', '--all');
  t.equal(all.code, 0, all.out);
  t.match(all.out, /Showing 4\/4 invocations/);
  const byService = await cli('invocations', 'list', '--all', '--service', 'Echo', '--handler', 'echo');
  t.equal(byService.code, 0, byService.out);
  t.match(byService.out, /Showing 3\/3 invocations/);

  const desc = await cli('invocations', 'describe', napping);
  t.equal(desc.code, 0, desc.out);
  t.match(desc.out, /Echo\/nap/);
  t.match(desc.out, /Sleep/);

  const count = await cli('sql', 'select count(*) from sys_invocation');
  t.equal(count.code, 0, count.out);
  t.match(count.out, /\b4\b/);
  t.match(count.out, /1 rows/);
  const status = await cli('services', 'status', 'Echo');
  t.equal(status.code, 0, status.out);
  t.match(status.out, napping);

  const kill = await cli('invocations', 'kill', napping, '--yes');
  t.equal(kill.code, 0, kill.out);
  t.match(kill.out, /Killed 1 invocations/);
  // a query after the kill answered sees it: the copy follows every durable batch
  t.same(await query(keel, `SELECT status, completion_result FROM sys_invocation WHERE id = '${napping}'`), [{ status: 'completed', completion_result: 'failure' }]);
  const journal = await query(keel, `SELECT index, entry_type FROM sys_journal WHERE id = '${napping}' ORDER BY index`);
  t.match(journal, [{ index: 0, entry_type: 'Command: Input' }, { index: 1, entry_type: 'Command: Sleep' }]);
});

t.test('limits: a query past its time, rows or bytes is cancelled with a code; the engine goes on', async (t) => {
  const keel = await startKeel(t, {
    env: {
      KEEL_ADMIN__QUERY_ENGINE__QUERY_TIMEOUT: '2s',
      KEEL_ADMIN__QUERY_ENGINE__MAX_RESULT_ROWS: '1000',
      KEEL_ADMIN__QUERY_ENGINE__MAX_RESULT_BYTES: '64KiB',
    },
  });
  const slow = await post(keel, 'SELECT sum(hash(range)) FROM range(10000000000000)');
  t.equal(slow.status, 408, JSON.stringify(slow.body));
  t.equal(slow.body.restate_code, 'KEEL0021');
  t.match(slow.body.message, /query_timeout/);
  const rows = await post(keel, 'SELECT * FROM range(5000)');
  t.equal(rows.status, 422, JSON.stringify(rows.body));
  t.equal(rows.body.restate_code, 'KEEL0022');
  t.match(rows.body.message, /max_result_rows/);
  const bytes = await post(keel, "SELECT repeat('x', 1000) AS s FROM range(500)", { json: false });
  t.equal(bytes.status, 422);
  t.equal(bytes.body.restate_code, 'KEEL0022');
  t.match(bytes.body.message, /max_result_bytes/);
  // the recursion no one stops: cut by the row limit as it streams
  const forever = await post(keel, 'WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r');
  t.ok([408, 422].includes(forever.status), String(forever.status));
  t.match(forever.body.restate_code, /KEEL002[12]/);
  // a client that leaves: its query is stopped, which is no fault of the server's (info, not error)
  const leave = new AbortController();
  const left = fetch(`${keel.admin}/query`, { method: 'POST', signal: leave.signal, headers: { 'content-type': 'application/json', accept: 'application/json' }, body: JSON.stringify({ query: 'SELECT sum(hash(range)) FROM range(10000000000000)' }) });
  setTimeout(() => leave.abort(), 300);
  await t.rejects(left);
  const gone = await eventually(() => keel.logLines('KEEL0024').at(0));
  t.equal(gone.level, 30, 'a client that left is logged at info');
  t.match(gone.err, /client went away/);
  t.same(keel.output.split('\n').filter((l) => l.startsWith('{') && JSON.parse(l).level >= 50), [], 'nothing at error level');
  // within the limits everything answers, in both shapes
  t.same((await post(keel, 'SELECT count(*) AS n FROM range(999)')).body.rows, [{ n: 999 }]);
  const arrow = await post(keel, 'SELECT * FROM range(1000)', { json: false });
  t.equal(arrow.table.numRows, 1000);
});

t.test('hostile SQL is refused with KEEL0020, bad SQL is a 400 with the engine\'s message', async (t) => {
  const keel = await startKeel(t);
  const hostile = [
    'CREATE TABLE x (a INT)',
    'DROP TABLE sys_journal',
    'ALTER TABLE state ADD COLUMN x INT',
    "INSERT INTO sys_rules (pattern) VALUES ('x')",
    'UPDATE sys_service SET name = 1',
    'DELETE FROM state',
    'SELECT 1; SELECT 2',
    'SELECT 1; DROP TABLE state',
    'INSTALL httpfs',
    'LOAD httpfs',
    "ATTACH '/tmp/x.duckdb' AS x",
    "COPY (SELECT 1) TO '/tmp/keel-copy.csv'",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_json_auto('/etc/hosts')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM '/etc/passwd.csv'",
    "SELECT * FROM glob('/*')",
    "SET enable_external_access = true",
    "PRAGMA database_list",
    'CALL checkpoint()',
    "EXPORT DATABASE '/tmp/keel-export'",
    "SELECT * FROM query('SELECT 1')",
    'SELECT pg_sleep(100)',
    'SELECT sleep_ms(100000) -- a comment',
    'SELECT id FROM sys_invocation WHERE pg_catalog.pg_sleep(1) IS NULL',
  ];
  for (const sql of hostile) {
    const r = await post(keel, sql);
    t.equal(r.status, 400, `${sql}: ${JSON.stringify(r.body)}`);
    t.equal(r.body.restate_code, 'KEEL0020', sql);
  }
  t.notOk(fs.existsSync('/tmp/keel-copy.csv'), 'nothing was written');

  const syntax = await post(keel, 'SELEC 1');
  t.equal(syntax.status, 400);
  t.equal(syntax.body.restate_code, 'KEEL0010');
  t.match(syntax.body.message, /syntax error/);
  const table = await post(keel, 'SELECT * FROM no_such_table');
  t.equal(table.status, 400);
  t.match(table.body.message, /no_such_table/);
  const column = await post(keel, 'SELECT nope FROM sys_invocation', { json: false });
  t.equal(column.status, 400, 'errors are JSON in both shapes');
  t.match(column.body.message, /nope/);
});

t.test('a status no timestamp can hold (a delayed send past year 275,000) renders, and so does every other', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [Echo]));
  const sender = await ingress(keel, '/Echo/poison', null);
  t.equal(sender.status, 200, JSON.stringify(sender.body));
  const id = sender.body;
  t.match(id, /^inv_/);
  t.equal((await ingress(keel, '/Echo/echo', 'now')).body, 'now');
  const rows = await query(keel, 'SELECT id, status, scheduled_start_at, created_at FROM sys_invocation ORDER BY created_at');
  t.equal(rows.length, 3);
  const poisoned = rows.find((r) => r.id === id);
  t.equal(poisoned.status, 'scheduled');
  t.notOk('scheduled_start_at' in poisoned, 'a time past what a timestamp holds is NULL');
  t.same((await query(keel, 'SELECT count(*) AS n FROM sys_invocation_status')), [{ n: 3 }]);
  const cli = restateCli(t, keel);
  const ls = await cli('invocations', 'list');
  t.equal(ls.code, 0, ls.out);
  t.match(ls.out, id);
});

t.test('ingress and admin answer while a heavy query runs', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_ADMIN__QUERY_ENGINE__QUERY_TIMEOUT: '10s' } });
  await register(keel, await serveServices(t, [Echo]));
  let heavyDone = 0;
  const heavy = post(keel, 'SELECT sum(hash(range)) FROM range(10000000000000)').then((r) => {
    heavyDone = Date.now();
    return r;
  });
  await new Promise((r) => setTimeout(r, 500)); // it is running
  const answered = [];
  for (let i = 0; i < 5; i++) {
    const r = await ingress(keel, '/Echo/echo', `v${i}`);
    t.equal(r.body, `v${i}`);
    answered.push(Date.now());
  }
  t.equal((await fetch(`${keel.admin}/health`)).status, 200);
  t.same(await query(keel, 'SELECT count(*) AS n FROM sys_invocation'), [{ n: 5 }], 'other queries run beside it');
  answered.push(Date.now());
  const r = await heavy;
  t.equal(r.status, 408);
  t.equal(r.body.restate_code, 'KEEL0021');
  t.ok(answered.every((at) => at <= heavyDone), 'every call was answered while the heavy query was still running');
});

for (const indexed of ['1000', '0']) {
t.test(`the copy: statuses change and leave, recent (by rowid) and older (by id), across forgets and a reload, each once (index up to ${indexed})`, async (t) => {
  // Two recent rows at most: almost every batch forgets them, and their ids join the filter of older ones.
  const keel = await startKeel(t, { env: { KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: '200ms', KEEL_ADMIN__QUERY_ENGINE__RECENT_STATUSES: '2', KEEL_ADMIN__QUERY_ENGINE__INDEXED_STATUSES: indexed } });
  await register(keel, await serveServices(t, [Echo]));
  const naps = [];
  for (let i = 0; i < 4; i++) naps.push((await ingress(keel, '/Echo/nap/send', null)).body.invocationId);
  for (const v of ['a', 'b', 'c', 'd', 'e']) await ingress(keel, '/Echo/echo', v);
  const counts = () => query(keel, 'SELECT status, count(*) AS n FROM sys_invocation GROUP BY status ORDER BY status');
  const twice = () => query(keel, 'SELECT id, count(*) AS n FROM sys_invocation GROUP BY id HAVING count(*) > 1');
  const statusOf = async (id) => (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${id}'`)).map((r) => r.status);
  await eventually(async () => JSON.stringify(await counts()) === JSON.stringify([{ status: 'completed', n: 5 }, { status: 'suspended', n: 4 }]));
  t.same(await twice(), []);
  const echoes = (await query(keel, "SELECT id FROM sys_invocation WHERE target_handler_name = 'echo' ORDER BY id")).map((r) => r.id);
  const manage = async (id, action) => t.equal((await fetch(`${keel.admin}/invocations/${id}/${action}`, { method: 'PATCH' })).status, 200, `${action} ${id}`);

  // A status written some batches ago (an older row) changes; a completed one is purged.
  await manage(naps[0], 'kill');
  await manage(echoes[0], 'purge');
  await eventually(async () => (await statusOf(naps[0])).join() === 'completed');
  t.same(await statusOf(echoes[0]), [], 'purged: gone from the copy');
  t.same(await counts(), [{ status: 'completed', n: 5 }, { status: 'suspended', n: 3 }]);
  t.same(await twice(), []);

  // The engine dies: its copy is loaded again (all rows older ones), and the same holds.
  process.kill(enginePid(keel), 'SIGKILL');
  await eventually(async () => (await counts()).length === 2, { timeout_ms: 30_000 });
  await manage(naps[1], 'kill');
  await manage(naps[0], 'purge');
  await eventually(async () => (await statusOf(naps[1])).join() === 'completed');
  t.same(await statusOf(naps[0]), []);
  for (const v of ['f', 'g', 'h']) await ingress(keel, '/Echo/echo', v);
  t.same(await counts(), [{ status: 'completed', n: 8 }, { status: 'suspended', n: 2 }]);
  t.same(await twice(), []);
});
}

t.test('the engine comes back after it dies, with every status', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [Echo]));
  for (const v of ['a', 'b']) await ingress(keel, '/Echo/echo', v);
  t.same(await query(keel, 'SELECT count(*) AS n FROM sys_invocation'), [{ n: 2 }]);
  const pid = enginePid(keel);
  t.ok(pid, 'the engine runs in a process of its own');
  process.kill(pid, 'SIGKILL');
  await ingress(keel, '/Echo/echo', 'c'); // while it is down
  const n = await eventually(async () => (await query(keel, 'SELECT count(*) AS n FROM sys_invocation'))[0].n === 3, { timeout_ms: 30_000 });
  t.ok(n);
  t.match(keel.logLines('KEEL0023').map((l) => l.msg).join('\n'), /query engine exited/);
  t.not(enginePid(keel), pid);
});

t.test('the engine does not outlive its server, even with a heavy query running', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_ADMIN__QUERY_ENGINE__QUERY_TIMEOUT: '60s' } });
  await query(keel, 'SELECT 1 AS one'); // the engine is up
  const pid = enginePid(keel);
  const cpuTicks = () => {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ').slice(11, 13).reduce((a, b) => a + Number(b), 0);
  };
  const heavy = post(keel, 'SELECT sum(hash(range)) FROM range(10000000000000)').catch(() => undefined);
  t.ok(await eventually(async () => {
    const before = cpuTicks();
    await new Promise((r) => setTimeout(r, 250));
    return cpuTicks() - before >= 10;
  }, { timeout_ms: 20_000 }), 'the heavy query runs');
  await keel.kill('SIGKILL');
  await heavy;
  // process.exit waited for the libuv thread running the query: the engine kept a core busy for good.
  const alive = () => {
    try {
      return !/^\S+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
    } catch {
      return false;
    }
  };
  t.ok(await eventually(async () => !alive(), { timeout_ms: 10_000 }), 'the engine is gone once its server is');
});

t.test('the engine runs while SQL is used: started by the first query, stopped after idle_timeout without one, started again from the store', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_ADMIN__QUERY_ENGINE__IDLE_TIMEOUT: '1500ms' } });
  await register(keel, await serveServices(t, [Echo]));
  await ingress(keel, '/Echo/echo', 'a');
  await new Promise((r) => setTimeout(r, 1_000)); // past the moment an engine kept for good boots
  t.equal(enginePid(keel), undefined, 'no engine before the first query');
  t.same(await query(keel, 'SELECT count(*) AS n FROM sys_invocation'), [{ n: 1 }], 'the first query waits for the copy');
  const first = enginePid(keel);
  t.ok(first, 'the first query started it');
  // Queries keep it: one every half second for longer than idle_timeout.
  for (let i = 0; i < 5; i++) {
    await new Promise((r) => setTimeout(r, 500));
    t.same(await query(keel, 'SELECT count(*) AS n FROM sys_invocation'), [{ n: 1 }]);
  }
  t.equal(enginePid(keel), first, 'in use: not stopped');
  await eventually(async () => enginePid(keel) === undefined, { timeout_ms: 10_000 });
  t.match(keel.logs(), /query engine stopped: no query for \d+ s \(admin.query_engine.idle_timeout\)/);
  // Stopped, it follows nothing; the next query's copy is loaded from the store.
  for (const v of ['b', 'c']) await ingress(keel, '/Echo/echo', v);
  const askedAt = Date.now();
  t.same(await query(keel, "SELECT count(*) AS n FROM sys_invocation WHERE status = 'completed'"), [{ n: 3 }]);
  t.not(enginePid(keel), first, 'a new engine');
  t.equal(keel.logLines('KEEL0023').length, 0, 'stopping unused is not a failure');

  // An engine that dies 1.2 s after the last query is not started again (its restart would come
  // 0.5 s later, past idle_timeout): the next query starts one.
  await new Promise((r) => setTimeout(r, Math.max(0, askedAt + 1_200 - Date.now())));
  process.kill(enginePid(keel), 'SIGKILL');
  await new Promise((r) => setTimeout(r, 1_000));
  t.equal(enginePid(keel), undefined, 'not restarted unused');
  t.same(await query(keel, 'SELECT count(*) AS n FROM sys_invocation'), [{ n: 3 }], 'the next query starts it');
});

t.test('idle_timeout 0: the engine starts with the server, before any query', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_ADMIN__QUERY_ENGINE__IDLE_TIMEOUT: '0' } });
  await eventually(async () => enginePid(keel) !== undefined, { timeout_ms: 10_000 });
  t.ok(enginePid(keel), 'running without a query');
});

t.test('PostgreSQL wire protocol on 9071: psql and the pg driver', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_ADMIN__QUERY_ENGINE__MAX_RESULT_ROWS: '1000' } });
  await register(keel, await serveServices(t, [Echo]));
  for (const v of ['a', 'b', 'c']) await ingress(keel, '/Echo/echo', v);

  const count = await psql(keel, ['-At', '-c', 'SELECT count(*) FROM sys_invocation']);
  t.equal(count.code, 0, count.err);
  t.equal(count.out.trim(), '3');
  const dt = await psql(keel, ['-c', '\\dt']);
  t.equal(dt.code, 0, dt.err);
  t.match(dt.out, /sys_journal/);
  t.notMatch(dt.out, /keel_|\bmain\b/, 'the engine\'s own tables are not listed');
  const dv = await psql(keel, ['-c', '\\dv']);
  t.match(dv.out, /sys_invocation/);
  t.notMatch(dv.out, /\bmain\b/);
  const dn = await psql(keel, ['-At', '-c', '\\dn']);
  t.same(dn.out.trim().split('\n'), ['public|keel'], 'one schema: public');
  const l = await psql(keel, ['-At', '-c', '\\l']);
  t.equal(l.code, 0, l.err);
  t.match(l.out.trim().split('\n'), [/^keel\|keel\|UTF8\|/], '\\l: one database');
  const refused = await psql(keel, ['-c', 'DROP TABLE state']);
  t.not(refused.code, 0);
  t.match(refused.err, /KEEL0020/);

  const client = new pg.Client({ host: keel.pgsql.host, port: keel.pgsql.port, user: 'keel', database: 'keel' });
  await client.connect();
  t.teardown(() => client.end());
  const byParam = await client.query('SELECT target, status, created_at FROM sys_invocation WHERE target_service_name = $1 ORDER BY created_at', ['Echo']);
  t.equal(byParam.rows.length, 3);
  t.match(byParam.rows[0], { target: 'Echo/echo', status: 'completed' });
  t.ok(byParam.rows[0].created_at instanceof Date, 'timestamps arrive as timestamptz');
  const n = await client.query('SELECT count(*)::BIGINT AS n, true AS b, 1.5::DOUBLE AS f FROM sys_invocation');
  t.same(n.rows, [{ n: '3', b: true, f: 1.5 }]);
  const bad = await client.query('SELECT * FROM nope').catch((e) => e);
  t.equal(bad.code, '42601');
  t.match(bad.message, /KEEL0010/);
  const limit = await client.query('SELECT * FROM range(5000)').catch((e) => e);
  t.equal(limit.code, '54000', 'the same limits apply');
  const hostile = await client.query("SELECT * FROM read_csv('/etc/passwd')").catch((e) => e);
  t.equal(hostile.code, '42501');
  t.same((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'the connection goes on after errors');
});

t.test("a query on 9071 stops when its client cancels it (psql's Ctrl-C) or goes away (a closed connection)", async (t) => {
  const keel = await startKeel(t, { env: { KEEL_ADMIN__QUERY_ENGINE__QUERY_TIMEOUT: '60s' } });
  const heavy = 'SELECT sum(hash(range)) FROM range(10000000000000)';
  /** CPU the engine's process spent over `ms` (a running heavy query keeps its threads busy). */
  const engineCpuMs = async (ms) => {
    const pid = enginePid(keel);
    const ticks = () => {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).split(' ').slice(11, 13).reduce((a, b) => a + Number(b), 0);
    };
    const before = ticks();
    await new Promise((r) => setTimeout(r, ms));
    return (ticks() - before) * 10;
  };
  /** Waits (up to `within` ms) until the engine is busy (a query runs) or quiet (none does), by 250 ms samples. */
  const until = async (state, within) => {
    const end = Date.now() + within;
    while (Date.now() < end) {
      const cpu = await engineCpuMs(250);
      if (state === 'busy' ? cpu >= 100 : cpu < 60) return true;
    }
    return false;
  };
  await query(keel, 'SELECT 1 AS one'); // the engine is up

  // psql sends a CancelRequest on a new connection, naming the session by the BackendKeyData it was given.
  let child;
  const psqlRun = new Promise((resolve) => {
    child = execFile('psql', ['-h', keel.pgsql.host, '-p', String(keel.pgsql.port), '-U', 'keel', '-d', 'keel', '-X', '-c', heavy], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, PGCONNECT_TIMEOUT: '10', PGSSLMODE: 'prefer' },
      timeout: 90_000,
    }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, err: String(stderr) }));
  });
  t.ok(await until('busy', 20_000), "psql's heavy query runs");
  const interrupted = Date.now();
  child.kill('SIGINT');
  const ended = await psqlRun;
  t.not(ended.code, 0);
  t.match(ended.err, /KEEL0024.*cancelled by its client/, 'psql shows why its query ended');
  t.ok(Date.now() - interrupted < 20_000, `ended by the cancel, not by its 60 s limit (${Date.now() - interrupted} ms after Ctrl-C)`);
  t.ok(await until('quiet', 10_000), 'the engine stopped working on it');

  // A pg client whose connection closes mid-query: the query stops too.
  const client = new pg.Client({ host: keel.pgsql.host, port: keel.pgsql.port, user: 'keel', database: 'keel' });
  await client.connect();
  client.on('error', () => {});
  const gone = client.query(heavy).catch((e) => e);
  t.ok(await until('busy', 20_000), 'the heavy query runs again');
  client.connection.stream.destroy();
  await gone;
  t.ok(await until('quiet', 10_000), 'the engine stopped working on the query of the closed connection');

  // A client that asks for TLS first (libpq 17's cancel API with sslmode=prefer): SSLRequest, 'N',
  // then the cancel request on the same connection, naming the pg driver's session by its BackendKeyData.
  const { Socket } = await import('node:net');
  const sendCancel = (processId, secretKey, { sslFirst }) => new Promise((resolve, reject) => {
    const cancel = Buffer.alloc(16);
    cancel.writeInt32BE(16, 0);
    cancel.writeInt32BE(80877102, 4);
    cancel.writeInt32BE(processId, 8);
    cancel.writeInt32BE(secretKey, 12);
    const s = new Socket().connect(keel.pgsql.port, keel.pgsql.host, () => {
      if (!sslFirst) return s.end(cancel);
      const ssl = Buffer.alloc(8);
      ssl.writeInt32BE(8, 0);
      ssl.writeInt32BE(80877103, 4);
      s.write(ssl);
      s.once('data', (answer) => {
        t.equal(answer.toString(), 'N', 'TLS refused');
        s.end(cancel);
      });
    });
    s.on('close', resolve).on('error', reject);
  });
  const driver = new pg.Client({ host: keel.pgsql.host, port: keel.pgsql.port, user: 'keel', database: 'keel' });
  await driver.connect();
  t.teardown(() => driver.end());
  t.ok(driver.processID > 0, 'the pg driver got a process id and secret key at startup');
  const viaTls = driver.query(heavy).catch((e) => e);
  t.ok(await until('busy', 20_000), 'a third heavy query runs');
  await sendCancel(driver.processID, driver.secretKey, { sslFirst: true });
  const viaTlsEnded = await viaTls;
  t.equal(viaTlsEnded.code, '57014');
  t.match(viaTlsEnded.message, /KEEL0024.*cancelled by its client/);
  t.same((await driver.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'the cancelled session goes on');

  // A cancel request naming no session (or the wrong key) is ignored; the server goes on.
  await sendCancel(424242, 7, { sslFirst: false });
  await sendCancel(driver.processID, driver.secretKey + 1, { sslFirst: false });
  const after = await psql(keel, ['-At', '-c', 'SELECT 41 + 1']);
  t.equal(after.code, 0, after.err);
  t.equal(after.out.trim(), '42');
  t.same(keel.logLines('KEEL0024').filter((l) => l.component === 'pgsql').map((l) => l.msg), [
    'pgsql: a client cancelled its query', 'pgsql: a client cancelled its query',
    'pgsql: a cancel request named no session of this server; ignored', 'pgsql: a cancel request named no session of this server; ignored',
  ], 'each cancel request logged once, at info');
  t.same(keel.looseLines(), [], 'nothing written outside the log (pg-gateway prints a connection it fails to stderr)');
});

t.test('a password on 9071', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_ADMIN__QUERY_ENGINE__PGSQL_PASSWORD: 's3cret' } });
  const wrong = await psql(keel, ['-c', 'SELECT 1'], { PGPASSWORD: 'nope' });
  t.not(wrong.code, 0);
  t.match(wrong.err, /password authentication failed/);
  const right = await psql(keel, ['-At', '-c', 'SELECT 41 + 1'], { PGPASSWORD: 's3cret' });
  t.equal(right.code, 0, right.err);
  t.equal(right.out.trim(), '42');
  const client = new pg.Client({ host: keel.pgsql.host, port: keel.pgsql.port, user: 'keel', database: 'keel', password: 's3cret' });
  await client.connect();
  t.same((await client.query('SELECT count(*)::INT AS n FROM sys_invocation')).rows, [{ n: 0 }]);
  await client.end();
  const anon = new pg.Client({ host: keel.pgsql.host, port: keel.pgsql.port, user: 'keel', database: 'keel', password: 'wrong' });
  t.rejects(anon.connect(), /password authentication failed/);
});
