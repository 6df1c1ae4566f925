// POST /query: the restate CLI's DataFusion-dialect queries (reference doc §4) on DuckDB in the
// query engine's process, JSON and Arrow stream answers, and error statuses.
import t from 'tap';
import { tableFromIPC } from 'apache-arrow';
import { DuckDBInstance } from '@duckdb/node-api';
import { analyze, treeText } from '../dist/admin/query/analyze.js';
import { markedText, markersAreConstants, shapeOf } from '../dist/admin/query/shape.js';
import { TABLES } from '../dist/admin/introspection.js';
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { newId, startAdmin } from './services/introspection-fake.mjs';
import { tempDir } from './services/meta-helpers.mjs';

async function query(base, sql, { json = true, path = '/v4/query' } = {}) {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: json ? 'application/json' : '*/*' },
    body: JSON.stringify({ query: sql }),
  });
  const buf = Buffer.from(await res.arrayBuffer());
  const ct = res.headers.get('content-type') ?? '';
  if (ct.includes('arrow')) return { status: res.status, ct, table: tableFromIPC(buf) };
  return { status: res.status, ct, body: JSON.parse(buf.toString()) };
}

/** The pid of the newest query engine process: a child of this test's process, the running test's (no shell: its command line would match). */
const enginePid = () => Number(execFileSync('pgrep', ['-n', '-P', String(process.pid), '-f', 'engine-main']).toString().trim());

/** `restate invocations describe`'s journal query (4.10), verbatim. */
const JOURNAL = (id) => `SELECT
            sj.index,
            sj.entry_type,
            sj.completed,
            sj.invoked_id,
            sj.invoked_target,
            sj.sleep_wakeup_at,
            sj.name,
            sj.promise_name,
            sj.version, sj.entry_json, sj.appended_at
        FROM sys_journal sj
        WHERE
            sj.id = '${id}'
        ORDER BY index DESC
        LIMIT 100`;

const typeOf = (table, i = 0) => String(table.schema.fields[i].type);
const arrowRows = (table) => table.toArray().map((r) => r.toJSON());

const LIST_COUNT = (where) => `SELECT COUNT(1) FROM (SELECT
            *
        FROM sys_invocation inv
        LIMIT 50000
        )
        ${where}`;
const LIST_IDS = (where, limit = 100) => `SELECT
            id
        FROM sys_invocation inv
        ${where}
        ORDER BY inv.created_at DESC, inv.id
        LIMIT ${limit}`;
const DETAIL = (where) => `SELECT
            inv.id,
            inv.target,
            inv.target_service_ty,
            inv.idempotency_key,
            inv.status,
            inv.created_at,
            inv.modified_at as state_modified_at,
            inv.pinned_deployment_id,
            inv.retry_count as num_retries,
            inv.last_failure as last_failure_message,
            inv.last_failure_related_entry_index as last_failure_entry_index,
            inv.last_failure_related_entry_name as last_failure_entry_name,
            inv.last_failure_related_entry_type as last_failure_entry_ty,
            inv.last_attempt_deployment_id,
            inv.last_attempt_server,
            inv.next_retry_at,
            inv.last_start_at,
            inv.invoked_by_id,
            inv.invoked_by_target,
            inv.trace_id,
            inv.completion_result,
            inv.completion_failure,
            dp.id IS NOT NULL as pinned_deployment_exists
        FROM sys_invocation inv
        LEFT JOIN sys_deployment dp ON dp.id = inv.pinned_deployment_id
        ${where}
        ORDER BY inv.created_at DESC, inv.id`;

t.test('the rewrites the CLI needs, and what a query reads, from DuckDB\'s parse tree', async (t) => {
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  t.teardown(() => c.closeSync());
  const tree = async (sql) => JSON.parse(String((await c.runAndReadAll('SELECT json_serialize_sql($1::VARCHAR)', [sql])).getRows()[0][0]));
  const back = async (root) => String((await c.runAndReadAll('SELECT json_deserialize_sql($1::JSON)', [treeText(root)])).getRows()[0][0]);
  const wanted = new Set(['sys_invocation', 'sys_journal', 'state']);

  // `restate services status`: FIRST_VALUE(x ORDER BY y) is an aggregate in DataFusion, first(...) in DuckDB
  let root = await tree('SELECT FIRST_VALUE(id ORDER BY created_at ASC) AS o, first_value(target) FROM sys_invocation GROUP BY status');
  let a = analyze(root, wanted);
  t.ok(a.rewritten);
  t.match(await back(root), /"first"\(id ORDER BY created_at ASC\).*"first"\("target"\)/);
  root = await tree('SELECT first_value(id) OVER (ORDER BY created_at) FROM sys_invocation');
  t.notOk(analyze(root, wanted).rewritten, 'the window function is left alone');
  // `restate invocations ls --service …`: the outer WHERE uses the alias of the subquery's table
  root = await tree("SELECT COUNT(1) FROM (SELECT * FROM sys_invocation inv LIMIT 50000) WHERE inv.target_service_name IN ('Greeter') AND status != 'completed'");
  a = analyze(root, wanted);
  t.ok(a.rewritten);
  t.match(await back(root), /LIMIT 50000\) AS inv WHERE/);

  // `x IN ('v')` is `x = 'v'` (DuckDB looks up its index on the copy's id for an equality only);
  // a longer list, a NOT IN and a subquery are left alone
  root = await tree("SELECT id FROM sys_invocation inv WHERE inv.id = 'a' AND inv.id in ('a') AND status NOT IN ('x') AND target IN ('p', 'q') AND key IN (SELECT 'k')");
  t.ok(analyze(root, wanted).rewritten);
  t.match(await back(root), "WHERE ((inv.id = 'a') AND (inv.id = 'a') AND (status NOT IN ('x')) AND (\"target\" IN ('p', 'q')) AND (\"key\" = ANY(SELECT 'k')))");
  t.notOk(analyze(await tree("SELECT id FROM sys_invocation WHERE id IN ('a', 'b')"), wanted).rewritten, 'two values: left alone');
  root = await tree("SELECT id IN ('a'), status FROM sys_invocation WHERE status = 'x' OR id IN ('b')");
  t.notOk(analyze(root, wanted).rewritten, 'in the select list (it names a column of the answer) or under an OR: left alone');

  // what is read: sys_journal by id, state by service and key; anything else whole
  a = analyze(await tree("SELECT sj.index FROM sys_journal sj WHERE sj.id = 'inv_1' ORDER BY index DESC LIMIT 100"), wanted);
  t.same(Object.fromEntries(a.tables), { sys_journal: { id: ['inv_1'] } });
  a = analyze(await tree("select key, value from state where service_name = 'Counter' and service_key = 'c1' ;"), wanted);
  t.same(a.tables.get('state'), { service_name: ['Counter'], service_key: ['c1'] });
  a = analyze(await tree("SELECT * FROM sys_journal WHERE id IN ('a', 'b') UNION ALL SELECT * FROM sys_journal WHERE id = 'c'"), wanted);
  t.same([...a.tables.get('sys_journal').id].sort(), ['a', 'b', 'c']);
  a = analyze(await tree("SELECT * FROM sys_journal WHERE id = 'a' OR index = 1"), wanted);
  t.same(a.tables.get('sys_journal'), {}, 'OR pins nothing');
  a = analyze(await tree("SELECT * FROM sys_journal j JOIN sys_invocation i ON i.id = j.id WHERE j.id = 'a'"), wanted);
  t.same(a.tables.get('sys_journal'), {}, 'a join is read whole');
  a = analyze(await tree('WITH sys_journal AS (SELECT 1) SELECT * FROM sys_journal'), wanted);
  t.notOk(a.tables.has('sys_journal'), 'a CTE of that name is not the table');

  // what may be kept: catalogue reads, and the functions they call
  a = analyze(await tree("SELECT COUNT(*) FROM information_schema.columns WHERE table_name = 'sys_journal' AND column_name IN ('promise_name')"), wanted);
  t.ok(a.catalog, 'information_schema is the catalogue');
  t.same([...a.functions], ['count_star']);
  a = analyze(await tree("SELECT now() FROM information_schema.tables JOIN sys_journal ON true"), wanted);
  t.ok(a.catalog && a.tables.has('sys_journal') && a.functions.has('now'), 'with an introspection table and now(): both seen');
  a = analyze(await tree('SELECT 1'), wanted);
  t.notOk(a.catalog, 'no table: not the catalogue');
  // pg_catalog views (qualified or not) read copies without the engine's own tables; a CTE of
  // that name, or a name that is only a property of every object, is not one
  root = await tree('SELECT relname FROM pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace');
  t.ok(analyze(root, wanted).catalog);
  t.match(await back(root), /FROM main\.keel_pg_class AS c .*JOIN main\.keel_pg_namespace AS n/);
  t.notOk(analyze(await tree('WITH pg_class AS (SELECT 1) SELECT * FROM pg_class'), wanted).catalog, 'a CTE named pg_class');
  for (const name of ['constructor', '__proto__']) {
    t.notOk(analyze(await tree(`SELECT * FROM ${name}`), wanted).catalog, `FROM ${name}`);
    t.notOk(analyze(await tree(`SELECT * FROM information_schema.${name}`), wanted).catalog, `FROM information_schema.${name}`);
  }

  // refused before they run
  t.match(analyze(await tree("SELECT * FROM read_csv('/etc/passwd')"), wanted).refusal, /read_csv/);
  t.match(analyze(await tree("SELECT * FROM '/etc/passwd.csv'"), wanted).refusal, /reading files/);
  t.notOk(analyze(await tree('SELECT * FROM range(3)'), wanted).refusal);
});

t.test('shapes: texts that differ only in string literals, and when a shape has no template', async (t) => {
  const a = shapeOf("SELECT id FROM sys_invocation inv WHERE inv.id = 'inv_1' AND target = 'it''s' LIMIT 1");
  const b = shapeOf("SELECT id FROM sys_invocation inv WHERE inv.id = 'inv_2' AND target = '' LIMIT 1");
  t.same(a.literals, ['inv_1', "it's"], 'values with the quote undone');
  t.equal(a.key, b.key, 'same shape');
  t.same(b.literals, ['inv_2', '']);
  t.not(shapeOf("SELECT id FROM sys_invocation WHERE id = 'x'").key, a.key, 'other text around the literals: another shape');
  t.equal(shapeOf('SELECT 1').key, 'SELECT 1');
  t.same(shapeOf(`SELECT "a'b" FROM t WHERE "c""'" = 'v'`).literals, ['v'], 'quotes inside quoted identifiers are not literals');
  for (const text of ["SELECT E'a\\n'", "SELECT X'00'", "SELECT U&'d'", "SELECT 'a' -- 'b'", "SELECT /* 'x' */ 1", 'SELECT $$x$$', 'SELECT $1', "SELECT 'open", 'SELECT "open']) {
    t.equal(shapeOf(text), undefined, `no shape: ${text}`);
  }
  t.equal(markedText(a, (i) => `M${i}`), "SELECT id FROM sys_invocation inv WHERE inv.id = 'M0' AND target = 'M1' LIMIT 1");

  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  t.teardown(() => c.closeSync());
  const tree = async (sql) => JSON.parse(String((await c.runAndReadAll('SELECT json_serialize_sql($1::VARCHAR)', [sql])).getRows()[0][0]));
  const marks = (n) => Array.from({ length: n }, (_, i) => `tagm${i}z`);
  const check = async (sql) => {
    const s = shapeOf(sql);
    const m = marks(s.literals.length);
    return markersAreConstants(await tree(markedText(s, (i) => m[i])), m, 'tag');
  };
  t.ok(await check("SELECT * FROM sys_journal WHERE id IN ('a', 'b') AND created_at > DATE '2024-01-01'"), 'constants, also under a cast');
  t.notOk(await check("SELECT * FROM 'file.csv' WHERE x = 'a'"), 'a literal read as a table name');
  t.notOk(await check("SELECT * FROM t WHERE x = 'a'\n'b'"), 'two literals the parser joins into one');
});

t.test('invocations list (4.9): count (Arrow Int64), ids, details (JSON)', async (t) => {
  const { base, source, deploymentId } = await startAdmin(t);
  const { ids } = source;
  for (const path of ['/query', '/v2/query', '/v3/query', '/v4/query']) {
    const c = await query(base, LIST_COUNT("WHERE status != 'completed'"), { json: false, path });
    t.equal(c.status, 200);
    t.equal(c.ct, 'application/vnd.apache.arrow.stream');
    t.equal(typeOf(c.table), 'Int64');
    t.equal(Number(c.table.getChildAt(0).get(0)), 6);
  }
  const all = await query(base, LIST_COUNT(''), { json: false });
  t.equal(Number(all.table.getChildAt(0).get(0)), 8);
  const zombie = await query(base, LIST_COUNT("WHERE (inv.pinned_deployment_id IS NOT NULL AND inv.pinned_deployment_id NOT IN (select id from sys_deployment)) AND status != 'completed'"), { json: false });
  t.equal(Number(zombie.table.getChildAt(0).get(0)), 0);
  const byDp = await query(base, LIST_COUNT(`WHERE (inv.pinned_deployment_id IN ('${deploymentId}') OR inv.last_attempt_deployment_id IN ('${deploymentId}')) AND status != 'completed'`), { json: false });
  t.equal(Number(byDp.table.getChildAt(0).get(0)), 4);

  const page = await query(base, LIST_IDS("WHERE status != 'completed'"));
  t.equal(page.status, 200);
  t.same(page.body.rows.map((r) => r.id), [ids.scheduled, ids.inboxed, ids.counterRunning, ids.suspended, ids.backingOff, ids.running]);
  const filtered = await query(base, LIST_IDS("WHERE inv.target_service_name IN ('Greeter') AND inv.target_handler_name IN ('greet') AND status IN ('backing-off')"));
  t.same(filtered.body.rows, [{ id: ids.backingOff }]);
  const keyed = await query(base, LIST_IDS("WHERE inv.target_service_key IN ('c1') AND inv.target_service_name IN (select name from sys_service where ty = 'virtual_object') AND status != 'completed'"));
  t.same(keyed.body.rows.map((r) => r.id), [ids.inboxed, ids.suspended]);
  const pending = await query(base, LIST_IDS("WHERE status = 'pending'"));
  t.same(pending.body.rows, [{ id: ids.inboxed }]);

  const idList = [ids.backingOff, ids.completed, ids.suspended, ids.failed].map((x) => `'${x}'`).join(',');
  const d = await query(base, DETAIL(`WHERE inv.id in (${idList})`));
  t.equal(d.status, 200);
  const [susp, bo, failed, done] = d.body.rows;
  t.same(susp, {
    id: ids.suspended, target: 'Counter/c1/add', target_service_ty: 'virtual_object', status: 'suspended',
    created_at: '2026-11-22T04:51:18.030Z', state_modified_at: '2026-11-22T04:51:18.030Z', pinned_deployment_id: deploymentId,
    num_retries: 0, last_attempt_deployment_id: deploymentId, pinned_deployment_exists: true,
  });
  t.match(bo, {
    id: ids.backingOff, target: 'Greeter/greet', target_service_ty: 'service', status: 'backing-off', num_retries: 8,
    last_failure_message: '[RT0007] boom', last_failure_entry_index: 1, last_failure_entry_name: 'step', last_failure_entry_ty: 'Command: Run',
    next_retry_at: '2026-11-22T04:51:27.000Z', last_start_at: '2026-11-22T04:51:26.000Z', pinned_deployment_exists: true,
  });
  t.same(failed, {
    id: ids.failed, target: 'Greeter/greet', target_service_ty: 'service', status: 'completed', created_at: '2026-11-22T04:51:18.002Z',
    state_modified_at: '2026-11-22T04:51:18.002Z', num_retries: 0, completion_result: 'failure', completion_failure: '[500] nope', pinned_deployment_exists: false,
  });
  t.equal(done.completion_result, 'success');
  // the same query in Arrow
  const da = await query(base, DETAIL(`WHERE inv.id in (${idList})`), { json: false });
  const f = Object.fromEntries(da.table.schema.fields.map((x) => [x.name, String(x.type)]));
  t.equal(f.created_at, 'Timestamp<MILLISECOND, +00:00>');
  t.equal(f.num_retries, 'Uint64');
  t.equal(f.pinned_deployment_exists, 'Bool');
  t.equal(f.id, 'Utf8');
  t.equal(da.table.numRows, 4);
});

t.test('invocations describe (4.10): lookup, probes, journal in both shapes', async (t) => {
  const { base, source } = await startAdmin(t);
  const id = source.ids.running;
  const first = await query(base, `SELECT
            id
        FROM sys_invocation inv
        WHERE inv.id = '${id}'
        
        LIMIT 1`);
  t.same(first.body.rows, [{ id }]);
  const det = await query(base, DETAIL(`WHERE inv.id = '${id}' AND inv.id in ('${id}')`));
  t.match(det.body.rows, [{ id, idempotency_key: 'idem-1', status: 'running', last_attempt_server: 'restate-sdk-typescript/1.17.2' }]);
  const p1 = await query(base, `SELECT COUNT(*) FROM information_schema.columns
            WHERE
                table_name = 'sys_journal'
                AND column_name IN ('promise_name')`, { json: false });
  t.equal(typeOf(p1.table), 'Int64');
  t.equal(Number(p1.table.getChildAt(0).get(0)), 1);
  const p2 = await query(base, `SELECT COUNT(*) FROM information_schema.columns
            WHERE
                table_name = 'sys_journal'
                AND column_name IN ('version', 'entry_json', 'appended_at')`, { json: false });
  t.equal(Number(p2.table.getChildAt(0).get(0)), 3);
  // Catalogue-only answers are kept until the engine restarts: the same query again (served from
  // what was kept) gives the same answer, in both encodings; one that calls a volatile function
  // is run each time.
  for (let i = 0; i < 2; i++) {
    const again = await query(base, `SELECT COUNT(*) FROM information_schema.columns
            WHERE
                table_name = 'sys_journal'
                AND column_name IN ('version', 'entry_json', 'appended_at')`, { json: false });
    t.equal(Number(again.table.getChildAt(0).get(0)), 3, `probe again (${i + 1})`);
    // The same text as JSON: an answer is kept per encoding, never served in the other one.
    const json = await query(base, `SELECT COUNT(*) FROM information_schema.columns
            WHERE
                table_name = 'sys_journal'
                AND column_name IN ('version', 'entry_json', 'appended_at')`);
    t.same(Object.values(json.body.rows[0]).map(Number), [3], `as JSON (${i + 1})`);
  }
  const draws = new Set();
  for (let i = 0; i < 3; i++) draws.add((await query(base, "SELECT random() AS r, COUNT(*) AS n FROM information_schema.tables")).body.rows[0].r);
  t.equal(draws.size, 3, 'random() over information_schema is not frozen');
  // Kept by the server, not the engine: with the engine's process stopped the probe still answers
  // at once, while a query that must run waits for it.
  const engine = enginePid();
  process.kill(engine, 'SIGSTOP');
  try {
    const kept = await query(base, `SELECT COUNT(*) FROM information_schema.columns
            WHERE
                table_name = 'sys_journal'
                AND column_name IN ('version', 'entry_json', 'appended_at')`, { json: false });
    t.equal(Number(kept.table.getChildAt(0).get(0)), 3, 'the probe answers with the engine stopped');
    const ran = await Promise.race([query(base, 'SELECT count(*) AS n FROM sys_invocation').then(() => 'answered'), new Promise((later) => setTimeout(later, 300, 'waiting'))]);
    t.equal(ran, 'waiting', 'a query that must run waits for the stopped engine');
  } finally {
    process.kill(engine, 'SIGCONT');
  }
  // information_schema is read from a copy made at the engine's start: the introspection tables
  // only (not the engine's own), and a reference qualified by the view's name still resolves.
  const listed = await query(base, 'SELECT table_name FROM information_schema.tables ORDER BY table_name');
  t.same(listed.body.rows.map((r) => r.table_name), Object.keys(TABLES).sort());
  const qualified = await query(base, "SELECT DISTINCT columns.table_name FROM information_schema.columns WHERE columns.column_name = 'entry_json'");
  t.same(qualified.body.rows, [{ table_name: 'sys_journal' }]);
  const j = await query(base, JOURNAL(id));
  t.equal(j.status, 200, JSON.stringify(j.body));
  t.equal(j.body.rows.length, 2);
  t.match(j.body.rows[0], { index: 1, entry_type: 'Command: Sleep', completed: false, sleep_wakeup_at: '2026-11-22T04:52:58.000Z', version: 2 });
  t.match(JSON.parse(j.body.rows[0].entry_json), { wake_up_time: Date.parse('2026-11-22T04:52:58.000Z'), result_completion_id: 1 });
  t.match(j.body.rows[1], { index: 0, entry_type: 'Command: Input', version: 2 });
  t.notOk('appended_at' in j.body.rows[0], 'journal entries carry no append time (known limit)');
  // (The CLI's fallback journal query, with CAST(1 AS INT UNSIGNED), is sent only when the two
  // probes above do not return 1 and 3: never against Keel.)
  const la = await query(base, `SELECT CAST(1 AS UBIGINT) AS version, CAST(NULL as TIMESTAMP) AS appended_at, CAST(NULL as STRING) AS s FROM sys_journal sj WHERE sj.id = '${id}'`, { json: false });
  t.same(la.table.schema.fields.map((f) => String(f.type)), ['Uint64', 'Timestamp<MILLISECOND, +00:00>', 'Utf8']);

  // The engine told the server which literal of the journal query's shape is the id: the server
  // reads the next one's journal as it sends the query, before the engine could ask (seen here
  // with the engine's process stopped), and the answer is that journal's.
  const read = [];
  const journalEntries = source.journalEntries;
  source.journalEntries = (jid) => (read.push(jid), journalEntries(jid));
  const other = source.ids.suspended;
  process.kill(engine, 'SIGSTOP');
  let next;
  try {
    next = query(base, JOURNAL(other));
    for (let waited_ms = 0; !read.includes(other) && waited_ms < 2_000; waited_ms += 20) await new Promise((later) => setTimeout(later, 20));
    t.same(read, [other], 'read by the server while the engine is stopped');
  } finally {
    process.kill(engine, 'SIGCONT');
  }
  t.match((await next).body.rows, [{ index: 1, entry_type: 'Command: Sleep' }, { index: 0, entry_type: 'Command: Input' }]);
  t.same(read, [other], 'and not asked for again');
  // A shape the engine has not parsed yet is not read ahead: with the engine stopped nothing is
  // read; the engine asks once it runs (the server does not guess ids from a text).
  read.length = 0;
  process.kill(engine, 'SIGSTOP');
  let fresh;
  try {
    fresh = query(base, `SELECT count(*) AS n FROM sys_journal WHERE id = '${id}' AND entry_type <> 'x'`);
    await new Promise((later) => setTimeout(later, 300));
    t.same(read, [], 'nothing read for a shape the engine has not told');
  } finally {
    process.kill(engine, 'SIGCONT');
  }
  t.same((await fresh).body.rows, [{ n: 2 }]);
  t.same(read, [id], 'read when the engine asked');
});

t.test('a journal read ahead that never ends is given up at the query\'s deadline, and frees its slot', { timeout: 30_000 }, async (t) => {
  const { base, source } = await startAdmin(t, { queryEngine: { query_timeout_ms: 1_500 } });
  const first = await query(base, JOURNAL(source.ids.suspended));
  t.equal(first.status, 200, 'the engine has told which literal of the shape is the id');
  const journalEntries = source.journalEntries;
  source.journalEntries = () => new Promise(() => {});
  const stuck = await Promise.all(Array.from({ length: 4 }, () => query(base, JOURNAL(source.ids.running))));
  t.same(stuck.map((r) => [r.status, r.body.restate_code]), Array(4).fill([408, 'KEEL0021']), 'as many as the engine runs at once');
  source.journalEntries = journalEntries;
  const after = await query(base, JOURNAL(source.ids.suspended));
  t.equal(after.status, 200, 'the slots they held are free');
  t.equal(after.body.rows.length, 2);
});

t.test('invocations cancel/kill/... lookups (4.11) use the raw status vocabulary', async (t) => {
  const { base, source } = await startAdmin(t);
  const { ids } = source;
  const byId = await query(base, `SELECT id, target FROM sys_invocation_status WHERE id = '${ids.backingOff}' AND status != 'completed' LIMIT 500`);
  t.same(byId.body.rows, [{ id: ids.backingOff, target: 'Greeter/greet' }]);
  const byTarget = await query(base, "SELECT id, target FROM sys_invocation_status WHERE ((target = 'Greeter/greet' AND target_service_ty = 'service') OR (target LIKE 'Greeter/greet/%' AND target_service_ty != 'service')) AND status != 'completed' LIMIT 500");
  t.same(new Set(byTarget.body.rows.map((r) => r.id)), new Set([ids.running, ids.backingOff, ids.scheduled]));
  const byObj = await query(base, "SELECT id, target FROM sys_invocation_status WHERE ((target = 'Counter/c1' AND target_service_ty = 'service') OR (target LIKE 'Counter/c1/%' AND target_service_ty != 'service')) AND status != 'completed' LIMIT 500");
  t.same(new Set(byObj.body.rows.map((r) => r.id)), new Set([ids.suspended, ids.inboxed]));
  const bySvc = await query(base, "SELECT id, target FROM sys_invocation_status WHERE target LIKE 'Counter/%' AND status != 'completed' LIMIT 500");
  t.equal(bySvc.body.rows.length, 3);
  const pause = await query(base, "SELECT id, target FROM sys_invocation_status WHERE target LIKE 'Greeter/%' AND status IN ('invoked', 'suspended') LIMIT 500");
  t.same(new Set(pause.body.rows.map((r) => r.id)), new Set([ids.running, ids.backingOff]));
  const purge = await query(base, "SELECT id, target FROM sys_invocation_status WHERE target LIKE 'Greeter/%' AND status = 'completed' LIMIT 500");
  t.same(new Set(purge.body.rows.map((r) => r.id)), new Set([ids.completed, ids.failed]));
  const inboxed = await query(base, "SELECT id FROM sys_invocation_status WHERE status = 'inboxed'");
  t.same(inboxed.body.rows, [{ id: ids.inboxed }]);
  // LIKE is case-sensitive, as in DataFusion
  const lower = await query(base, "SELECT id FROM sys_invocation_status WHERE target LIKE 'greeter/%'");
  t.same(lower.body.rows, []);
});

t.test('deployments remove (4.4) and services describe (4.6)', async (t) => {
  const { base, deploymentId } = await startAdmin(t);
  const rm = await query(base, `SELECT
            target_service_name as service,
            target_handler_name as handler,
            COUNT(1) AS inv_count
            FROM sys_invocation_status
            WHERE pinned_deployment_id = '${deploymentId}' AND status != 'completed'
            GROUP BY pinned_deployment_id, target_service_name, target_handler_name`);
  const byService = (a, b) => a.service.localeCompare(b.service);
  t.same(rm.body.rows.sort(byService), [{ service: 'Counter', handler: 'add', inv_count: 2 }, { service: 'Greeter', handler: 'greet', inv_count: 2 }]);
  const d = await query(base, `SELECT COUNT(1) AS inv_count
            FROM sys_invocation_status
            WHERE pinned_deployment_id = '${deploymentId}' AND status != 'completed'`, { json: false });
  t.equal(d.table.schema.fields[0].name, 'inv_count');
  t.equal(typeOf(d.table), 'Int64');
  t.equal(Number(d.table.getChildAt(0).get(0)), 4);
});

t.test('services status (4.7)', async (t) => {
  const { base, source } = await startAdmin(t);
  const { ids } = source;
  const pending = await query(base, `SELECT
                target_service_name,
                target_handler_name,
                'pending' as status,
                COUNT(1) as num_invocations,
                MIN(created_at) as oldest_at,
                FIRST_VALUE(id ORDER BY created_at ASC) as oldest_invocation
             FROM sys_invocation_status
             WHERE status == 'inboxed' AND target_service_name IN ('Greeter','Counter')
             GROUP BY target_service_name, target_handler_name`);
  t.same(pending.body.rows, [{ target_service_name: 'Counter', target_handler_name: 'add', status: 'pending', num_invocations: 1, oldest_at: '2026-11-22T04:51:18.040Z', oldest_invocation: ids.inboxed }]);
  const summary = await query(base, `SELECT
                target_service_name,
                target_handler_name,
                status,
                COUNT(1) as num_invocations,
                MIN(created_at) as oldest_at,
                FIRST_VALUE(id ORDER BY created_at ASC) as oldest_invocation
            FROM sys_invocation
            WHERE target_service_name IN ('Greeter','Counter')
            GROUP BY target_service_name, target_handler_name, status
            ORDER BY target_handler_name`);
  const completed = summary.body.rows.find((r) => r.target_service_name === 'Greeter' && r.status === 'completed');
  t.same(completed, { target_service_name: 'Greeter', target_handler_name: 'greet', status: 'completed', num_invocations: 2, oldest_at: '2026-11-22T04:51:18.001Z', oldest_invocation: ids.completed });
  const counterRunning = summary.body.rows.find((r) => r.target_service_name === 'Counter' && r.status === 'running');
  t.equal(counterRunning.oldest_invocation, ids.counterRunning);
  t.equal(summary.body.rows.length, 7);
  const inbox = await query(base, `SELECT
                service_name,
                service_key,
                COUNT(1) as num_pending
             FROM sys_inbox
             WHERE service_name IN ('Counter')
             GROUP BY service_name, service_key
             ORDER BY num_pending DESC`);
  t.same(inbox.body.rows, [{ service_name: 'Counter', service_key: 'c1', num_pending: 1 }]);
  const locks = await query(base, `SELECT
                target_service_name as service_name,
                target_service_key as service_key,
                status as invocation_status,
                first_value(id) as invocation_holding_lock,
                first_value(target_handler_name) as invocation_method_holding_lock,
                first_value(created_at) as invocation_created_at,
                first_value(modified_at) as modified_at,
                first_value(pinned_deployment_id) as pinned_deployment_id,
                first_value(last_attempt_deployment_id) as last_attempt_deployment_id,
                first_value(last_failure) as last_failure_message,
                first_value(next_retry_at) as next_retry_at,
                first_value(last_start_at) as last_start_at,
                0 as num_pending,
                sum(retry_count) as num_retries
            FROM sys_invocation
            WHERE status != 'pending' AND target_service_name IN ('Counter')
            GROUP BY target_service_name, target_service_key, status`);
  // GROUP BY without ORDER BY: no order is promised (the CLI's query; Restate's DataFusion neither).
  t.match([...locks.body.rows].sort((a, b) => a.service_key.localeCompare(b.service_key)), [
    { service_name: 'Counter', service_key: 'c1', invocation_status: 'suspended', invocation_holding_lock: ids.suspended, invocation_method_holding_lock: 'add', invocation_created_at: '2026-11-22T04:51:18.030Z', num_pending: 0, num_retries: 0 },
    { service_name: 'Counter', service_key: 'c2', invocation_status: 'running', invocation_holding_lock: ids.counterRunning },
  ]);
  const la = await query(base, 'SELECT MIN(created_at) AS oldest_at, sum(retry_count) AS n, COUNT(*) AS c, 0 AS z FROM sys_invocation', { json: false });
  // DuckDB sums UBIGINT into HUGEINT: answered as Int64
  t.same(la.table.schema.fields.map((f) => String(f.type)), ['Timestamp<MILLISECOND, +00:00>', 'Int64', 'Int64', 'Int64']);
});

t.test('state (4.12), vqueues and rules (4.14), sql (4.13)', async (t) => {
  const { base } = await startAdmin(t);
  const s = await query(base, "select key, value from state where service_name = 'Counter' and service_key = 'c1' ;");
  t.same(s.body.rows, [{ key: 'count', value: '35' }, { key: 'label', value: '2268656c6c6f22' }]);
  const clear = await query(base, "SELECT service_name, service_key, key, value FROM state WHERE service_name = 'Counter' AND service_key = 'c2'");
  t.same(clear.body.rows, []);
  const vq = await query(base, 'SELECT id, is_active, queue_is_paused, service_name, scope, limit_key, lock_name, created_at, last_enqueued_at, last_start_at, last_attempt_at, last_finish_at, num_inbox, num_running, num_suspended, num_paused, num_finished FROM sys_vqueue_meta LIMIT 100');
  t.same(vq, { status: 200, ct: 'application/json', body: { rows: [] } }); // exactly: the CLI rejects a charset parameter
  const rules = await query(base, 'SELECT pattern, concurrency, description, disabled, version, last_modified FROM sys_rules ORDER BY pattern');
  t.same(rules.body, { rows: [] });
  const sql = await query(base, 'select id, status from sys_invocation', { json: false });
  t.equal(sql.table.numRows, 8);
  // count(*) is named as Restate names it, in both encodings (DuckDB says count_star()); an alias
  // or a FILTER keeps its own name
  const counted = await query(base, "select count(*), count(*) as n, count(*) filter (where status = 'x') from sys_invocation");
  t.same(Object.entries(counted.body.rows[0]).map(([k, v]) => [k.replace(/ FILTER.*/, ' FILTER'), v]), [['count(*)', 8], ['n', 8], ['count_star() FILTER', 0]]);
  const countedArrow = await query(base, 'SELECT COUNT(*) FROM (SELECT id FROM sys_invocation)', { json: false });
  t.same(countedArrow.table.schema.fields.map((f) => f.name), ['count(*)']);
  t.same(sql.table.schema.fields.map((f) => String(f.type)), ['Utf8', 'Utf8']);
  const svc = await query(base, 'select name, revision, public, ty from sys_service order by name');
  t.same(svc.body.rows, [{ name: 'Counter', revision: 1, public: true, ty: 'virtual_object' }, { name: 'Greeter', revision: 1, public: true, ty: 'service' }]);
  const sa = await query(base, 'select * from sys_service', { json: false });
  const types = Object.fromEntries(sa.table.schema.fields.map((f) => [f.name, String(f.type)]));
  t.equal(types.revision, 'Uint64');
  t.equal(types.public, 'Bool');
  const stateArrow = await query(base, 'select * from state', { json: false });
  t.same(arrowRows(stateArrow.table).map((r) => Buffer.from(r.value).toString()), ['5', '"hello"']);
  const keyed = await query(base, 'select service_key, invocation_id from sys_keyed_service_status order by service_key');
  t.equal(keyed.body.rows.length, 2);
  const prom = await query(base, 'select key, completed, completion_success_value_utf8 from sys_promise');
  t.same(prom.body.rows, [{ key: 'p', completed: true, completion_success_value_utf8: '1' }]);
});

t.test('a table filled per query is read only as far as max_result_bytes: filter it', async (t) => {
  const { base, source } = await startAdmin(t, { queryEngine: { max_result_bytes: 400 } });
  const all = await query(base, 'SELECT id, index, entry_json FROM sys_journal');
  t.equal(all.status, 422, JSON.stringify(all.body));
  t.equal(all.body.restate_code, 'KEEL0022');
  t.match(all.body.message, /sys_journal.*filter it by id/);
  const one = await query(base, `SELECT index FROM sys_journal WHERE id = '${source.ids.running}' ORDER BY index`);
  t.same(one.body.rows, [{ index: 0 }, { index: 1 }], 'by id only that journal is read');
});

t.test('errors', async (t) => {
  const { base } = await startAdmin(t);
  const parse = await query(base, 'SELEC id FROM sys_invocation');
  t.equal(parse.status, 400);
  t.type(parse.body.message, 'string');
  const syntax = await query(base, 'SELECT id FROM sys_invocation WHERE');
  t.equal(syntax.status, 400);
  const schema = await query(base, 'SELECT nope FROM sys_invocation', { json: false });
  t.equal(schema.status, 400, 'an unknown column is the query\'s fault');
  t.match(schema.body.message, /nope/);
  t.equal(schema.body.restate_code, 'KEEL0010');
  const table = await query(base, 'SELECT * FROM nope');
  t.equal(table.status, 400, 'so is an unknown table');
  t.equal(table.body.restate_code, 'KEEL0010');
  for (const body of [{}, { query: 5 }, [], 'null']) {
    const res = await fetch(base + '/v4/query', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    t.ok(res.status === 400 || res.status === 422, String(res.status));
    t.type((await res.json()).message, 'string');
  }
  const bad = await fetch(base + '/v4/query', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{not json' });
  t.equal(bad.status, 400);
  const empty = await fetch(base + '/query', { method: 'POST' });
  t.equal(empty.status, 400);
});

t.test('a query that reads the copy waits for its load outside its time limit (a first query on a large store is not refused); others do not wait', async (t) => {
  const { base, source } = await startAdmin(t, { queryEngine: { query_timeout_ms: 500 } });
  const lines = source.invocationLines;
  let loads = 0;
  source.invocationLines = async function* () {
    loads++;
    await new Promise((r) => setTimeout(r, 1_500)); // a load three times the time limit
    yield* lines();
  };
  const started = Date.now();
  const timed = (sql) => query(base, sql).then((r) => ({ ...r, ms: Date.now() - started }));
  const [a, b] = await Promise.all([timed('SELECT count(*) AS n FROM sys_invocation'), timed('SELECT 1 AS one')]);
  t.equal(a.status, 200, JSON.stringify(a.body));
  t.equal(Number(a.body.rows[0].n), 8, 'the whole copy');
  t.ok(a.ms >= 1_500, `answered once the copy was loaded (${a.ms} ms)`);
  t.equal(b.status, 200, JSON.stringify(b.body));
  t.ok(b.ms < 1_500, `a query that reads no status does not wait for the copy (${b.ms} ms)`);
  t.equal(loads, 1);
  // Its time limit still holds once the copy is there.
  const slow = await query(base, 'SELECT count(*) AS n FROM range(100000000000) a');
  t.equal(slow.status, 408, JSON.stringify(slow.body));
  t.equal(slow.body.restate_code, 'KEEL0021');

  // The engine dies while a query waits for its copy: the query is answered (by the next engine, or
  // KEEL0023 when none is ready within its limit), never held.
  const running = () => {
    try {
      return enginePid();
    } catch {
      return undefined; // pgrep: none
    }
  };
  const first = enginePid();
  process.kill(first, 'SIGKILL');
  for (let i = 0; running() === first || running() === undefined; i++) {
    if (i >= 200) return t.fail('no new engine started');
    await new Promise((r) => setTimeout(r, 50));
  }
  const waiting = timed('SELECT count(*) AS n FROM sys_invocation');
  await new Promise((r) => setTimeout(r, 700)); // within the second engine's load
  process.kill(enginePid(), 'SIGKILL');
  const after = await waiting;
  t.ok(after.status === 200 || (after.status === 503 && after.body.restate_code === 'KEEL0023'), `answered: ${after.status} ${JSON.stringify(after.body)}`);
  // The restarts back off (1 s, 2 s), longer than this time limit: a few 503s first.
  let next;
  for (let i = 0; i < 40 && next?.status !== 200; i++) next = await query(base, 'SELECT count(*) AS n FROM sys_invocation');
  t.equal(next.status, 200, 'and the engine after it answers');
  t.equal(Number(next.body.rows[0].n), 8);
});

t.test('two engines in one process and one directory: the end of one leaves the other\'s files alone', async (t) => {
  const dir = tempDir(t);
  const a = await startAdmin(t, { baseDir: dir });
  t.equal(Number((await query(a.base, 'SELECT count(*) AS n FROM sys_invocation')).body.rows[0].n), 8);
  const b = await startAdmin(t, { baseDir: dir });
  t.equal(Number((await query(b.base, 'SELECT count(*) AS n FROM sys_invocation')).body.rows[0].n), 8);
  const engines = () => readdirSync(join(dir, 'query')).filter((n) => n.startsWith('engine-'));
  t.equal(engines().length, 2, 'a directory each');
  await a.close();
  for (let i = 0; engines().length !== 1; i++) {
    t.ok(i < 200, 'the closed engine removed its directory, and only its own');
    if (i >= 200) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  // The engine that goes on writes each change to a file in its directory before it loads it.
  b.source.put({ id: newId(), service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status: 'scheduled', created_at_ms: Date.now() });
  const after = await query(b.base, 'SELECT count(*) AS n FROM sys_invocation');
  t.equal(after.status, 200, JSON.stringify(after.body));
  t.equal(Number(after.body.rows[0].n), 9, 'the change was applied');
});

t.test('lookups by id (the copy\'s index on id) follow every change: a new status, a replaced one, a purged one', async (t) => {
  const { base, source } = await startAdmin(t);
  const byId = async (id) => (await query(base, DETAIL(`WHERE inv.id = '${id}' AND inv.id in ('${id}')`))).body.rows.map((r) => r.status);
  const id = newId();
  t.same(await byId(id), [], 'not there yet');
  source.put({ id, service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status: 'scheduled', created_at_ms: Date.now() });
  t.same(await byId(id), ['scheduled'], 'a new status');
  for (const status of ['running', 'suspended', 'completed']) {
    source.put({ id, service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status, created_at_ms: Date.now() });
    t.same(await byId(id), [status], `replaced: ${status}, once`);
  }
  t.same(await byId(source.ids.running), ['running'], 'an id of the initial load');
  await source.manage(id, 'purge');
  t.same(await byId(id), [], 'purged');
  t.equal(Number((await query(base, `SELECT count(*) AS n FROM sys_invocation WHERE id IN ('${id}', '${source.ids.running}')`)).body.rows[0].n), 1);
});

t.test('each query starts from empty per-query tables: nothing one query filled reaches the next', async (t) => {
  const { base, source } = await startAdmin(t);
  for (const id of [source.ids.running, source.ids.suspended, source.ids.running]) {
    const j = await query(base, `SELECT DISTINCT id, count(*) OVER () AS n FROM sys_journal WHERE id = '${id}'`);
    t.same(j.body.rows.map((r) => [r.id, Number(r.n)]), [[id, 2]], `only the journal of ${id}`);
  }
  for (let i = 0; i < 3; i++) {
    const d = await query(base, 'SELECT count(*) AS n FROM sys_deployment');
    t.equal(Number(d.body.rows[0].n), 1, 'the one deployment, once');
  }
  const none = await query(base, "SELECT count(*) AS n FROM sys_journal WHERE id = 'inv_1nope'");
  t.equal(Number(none.body.rows[0].n), 0, 'a journal nobody has: empty, not the last one read');
});

t.test('texts of one shape, each with its own literals: what it reads, the text it runs, its column names', async (t) => {
  const { base, source } = await startAdmin(t);
  const { running, suspended } = source.ids;
  // the second text of each shape runs from the first one's template
  for (const id of [running, suspended, 'inv_1nope', running]) {
    const j = await query(base, `SELECT '${id}' AS asked, count(*) AS n FROM sys_journal sj WHERE sj.id = '${id}' AND sj.index >= 0`);
    t.same(j.body.rows.map((r) => [r.asked, Number(r.n)]), [[id, id === 'inv_1nope' ? 0 : 2]], `the journal of ${id}, and only it`);
    const d = await query(base, `SELECT id FROM sys_invocation inv WHERE inv.id = '${id}' LIMIT 1`);
    t.same(d.body.rows, id === 'inv_1nope' ? [] : [{ id }], `sys_invocation by ${id}`);
  }
  // rewritten texts (information_schema is read from a copy): the literals go into DuckDB's text
  for (const [table, n] of [['sys_journal', 1], ['sys_invocation', 1], ['nope', 0], ["it's", 0]]) {
    const c = await query(base, `SELECT '${table.replaceAll("'", "''")}', count(*) AS n FROM information_schema.tables WHERE table_name = '${table.replaceAll("'", "''")}'`);
    t.equal(c.status, 200, JSON.stringify(c.body));
    t.same(c.body.rows.map((r) => Object.values(r).map(String)), [[table, String(n)]], `information_schema.tables for ${table}`);
    t.equal(Object.keys(c.body.rows[0])[0], `'${table.replaceAll("'", "''")}'`, 'the column is named after the literal asked for');
  }
  // a shape whose literal is not a constant has no template: each text is parsed as it is
  for (const file of ['/etc/passwd', '/etc/hostname']) {
    const r = await query(base, `SELECT * FROM '${file}'`);
    t.equal(r.status, 400);
    t.equal(r.body.restate_code, 'KEEL0020', `${file}: refused`);
    t.match(r.body.message, /not a table name/);
  }
  // a wrong text of a shape that has a template is still an error of its own
  const bad = await query(base, `SELECT id FROM sys_invocation inv WHERE inv.id = '${running}' LIMIT 'x'`);
  t.equal(bad.status, 400);
});

t.test('the registry\'s tables are kept between queries and follow its changes', async (t) => {
  const { base, registry, deploymentId } = await startAdmin(t);
  const deployments = async () => (await query(base, 'SELECT id FROM sys_deployment')).body.rows.map((r) => r.id);
  const services = async () => (await query(base, 'SELECT name FROM public.sys_service ORDER BY name')).body.rows.map((r) => r.name);
  t.same(await deployments(), [deploymentId]);
  t.same(await services(), ['Counter', 'Greeter']);
  t.same(await deployments(), [deploymentId], 'kept: the same rows once');
  t.ok(await registry.remove(deploymentId));
  t.same(await deployments(), [], 'the removed deployment is gone from the next query');
  t.same(await services(), []);
  const joined = await query(base, DETAIL("WHERE inv.status = 'running'"));
  t.ok(joined.body.rows.length > 0 && joined.body.rows.every((r) => r.pinned_deployment_exists === false), 'and from joins with it');
});

t.test('the engine process alone: a query cancelled while it waits for the server\'s rows holds no other query up', async (t) => {
  const { fork } = await import('node:child_process');
  const dir = tempDir(t);
  const engine = fork(join(import.meta.dirname, '..', 'dist', 'admin', 'query', 'engine-main.js'), [], { serialization: 'advanced', stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  t.teardown(() => engine.kill('SIGKILL'));
  const waiting = [];
  const next = (match) => new Promise((resolve) => waiting.push({ match, resolve }));
  engine.on('message', (m) => {
    const i = waiting.findIndex((w) => w.match(m));
    if (i >= 0) waiting.splice(i, 1)[0].resolve(m);
  });
  const ready = next((m) => m.t === 'ready');
  engine.send({ t: 'init', options: { dir, memory_limit_bytes: 256 * 1024 * 1024, threads: 1, max_result_rows: 1000, max_result_bytes: 1 << 20, recent_statuses: 65_536, indexed_statuses: 1_000_000 } });
  await ready;
  const loaded = next((m) => m.t === 'applied' && m.seq === 1);
  engine.send({ t: 'load-begin' });
  engine.send({ t: 'load-end', seq: 1 });
  await loaded;
  const query = (qid) => ({ t: 'query', qid, sql: 'SELECT id FROM sys_deployment', format: 'json', params: undefined, timeout_ms: 20_000, limit_ms: 20_000, registry_version: 1 });
  // the first query asks for the registry's rows and is cancelled before they come: never answered
  const asked = next((m) => m.t === 'need' && m.qid === 1);
  engine.send(query(1));
  t.equal((await asked).table, 'sys_deployment');
  engine.send({ t: 'cancel', qid: 1 });
  // the second one refills the table itself and is answered
  const askedAgain = next((m) => m.t === 'need' && m.qid === 2);
  const answered = next((m) => (m.t === 'answer' || m.t === 'failed') && m.qid === 2);
  engine.send(query(2));
  await askedAgain;
  engine.send({ t: 'rows', qid: 2, table: 'sys_deployment', rows: [{ id: 'dp_one' }] });
  const answer = await answered;
  t.equal(answer.t, 'answer', JSON.stringify(answer.error ?? ''));
  t.same(JSON.parse(Buffer.from(answer.chunk).toString()).rows, [{ id: 'dp_one' }]);
});

t.test('the engine process alone: an unreadable status in a chunk of the initial scan costs only itself', async (t) => {
  const { fork } = await import('node:child_process');
  const { InvocationId, randomPartitionKey } = await import('../dist/common/ids.js');
  const dir = tempDir(t);
  const engine = fork(join(import.meta.dirname, '..', 'dist', 'admin', 'query', 'engine-main.js'), [], { serialization: 'advanced', stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  t.teardown(() => engine.kill('SIGKILL'));
  const waiting = [];
  const logs = [];
  const next = (match) => new Promise((resolve) => waiting.push({ match, resolve }));
  engine.on('message', (m) => {
    if (m.t === 'log') logs.push(m);
    const i = waiting.findIndex((w) => w.match(m));
    if (i >= 0) waiting.splice(i, 1)[0].resolve(m);
  });
  const ready = next((m) => m.t === 'ready');
  engine.send({ t: 'init', options: { dir, memory_limit_bytes: 256 * 1024 * 1024, threads: 1, max_result_rows: 10_000, max_result_bytes: 1 << 22, recent_statuses: 65_536, indexed_statuses: 1_000_000 } });
  await ready;
  const ids = Array.from({ length: 1000 }, () => InvocationId.random(randomPartitionKey()).text);
  const lines = ids.map((id, i) => JSON.stringify({ id, service: 'Greeter', handler: 'greet', key: '', service_type: 'Service', status: 'completed', epoch: 0, journal_length: 0, retry_count: 0, created_at_ms: 1_000 + i, modified_at_ms: 1_000 + i }));
  lines.splice(700, 0, '{"id": "inv_broken", "created_at_ms": ');
  const loaded = next((m) => m.t === 'applied' && m.seq === 2);
  engine.send({ t: 'load-begin' });
  engine.send({ t: 'load', seq: 1, lines: Buffer.from(lines.join('\n') + '\n') });
  engine.send({ t: 'load-end', seq: 2 });
  await loaded;
  const answered = next((m) => (m.t === 'answer' || m.t === 'failed') && m.qid === 1);
  engine.send({ t: 'query', qid: 1, sql: 'SELECT count(*) AS n, min(id) AS lo FROM sys_invocation', format: 'json', params: undefined, timeout_ms: 20_000, limit_ms: 20_000, registry_version: 1 });
  const answer = await answered;
  t.equal(answer.t, 'answer', JSON.stringify(answer.error ?? ''));
  t.equal(Number(JSON.parse(Buffer.from(answer.chunk).toString()).rows[0].n), 1000, 'every readable status is in the copy');
  t.ok(logs.some((l) => /1 invocation statuses cannot be shown/.test(l.msg)), 'and the one unreadable is counted in a warning');
});
