// The rule book of flow control on the admin side, as restate-server 1.7.12 serves it: the real
// `restate` CLI's `rules set|list|enable|disable|delete`, `PUT /limits/rules` and
// `POST /limits/rules/bulk-delete` (shapes, versions, preconditions, validation naming the field,
// 405 elsewhere), `sys_rules` over /query (JSON and Arrow) and the PostgreSQL wire, the book
// reaching every partition, and the book surviving a restart. One Keel for the file.
import t from 'tap';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { tableFromIPC } from 'apache-arrow';
import pg from 'pg';
import { MetaLog } from '../dist/metadata/store.js';
import { startKeel, adminCall, query, tempDir } from './helpers/keel.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLI = path.join(here, '..', 'node_modules', '.bin', 'restate');

const keel = await startKeel(t);
const home = tempDir(t, 'keel-cli-home-');

const cli = (...args) => new Promise((resolve) => {
  execFile(CLI, args, {
    env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: keel.admin, RESTATE_CLI_CONFIG_HOME: home, CI: '1', NO_COLOR: '1', TERM: 'dumb' },
    timeout: 30_000,
  }, (err, stdout, stderr) => {
    resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) });
  });
});

const put = (body, prefix = '') => adminCall(keel, 'PUT', `${prefix}/limits/rules`, body);
const bulkDelete = (body, prefix = '') => adminCall(keel, 'POST', `${prefix}/limits/rules/bulk-delete`, body);
const rules = () => query(keel, 'SELECT pattern, concurrency, description, disabled, version, last_modified FROM sys_rules ORDER BY pattern');
/** The rule book version each partition's log holds (GET /partitions). */
const partitionVersions = async () => (await adminCall(keel, 'GET', '/partitions')).json.partitions.map((p) => p.limit_rules_version);
/** The book's version now: a new rule takes it, so a probe rule created and deleted tells it (the delete bumps it once more). */
async function bookVersion() {
  const created = await put([{ pattern: 'probe-version' }]);
  const removed = await bulkDelete([{ pattern: 'probe-version' }]);
  if (created.status !== 200 || removed.status !== 200) throw new Error(`probe failed: ${created.text} ${removed.text}`);
  return created.json[0].version + 1;
}
const errorLines = () => keel.output.split('\n').filter((l) => l.startsWith('{') && JSON.parse(l).level >= 50);

t.test('GET /version announces vqueues', async (t) => {
  const v = await adminCall(keel, 'GET', '/v4/version');
  t.equal(v.status, 200);
  t.equal(v.json.features.vqueues, true);
});

t.test('the real restate CLI: rules set, list, list -x, disable, enable, delete', async (t) => {
  const empty = await cli('rules', 'list');
  t.equal(empty.code, 0, empty.out);
  t.match(empty.out, /No rules defined\./);

  const created = await cli('rules', 'set', 'cli1/*', '--concurrency', '3', '-y');
  t.equal(created.code, 0, created.out);
  const v1 = Number(/Created rule 'cli1\/\*' \(version v(\d+)\)/.exec(created.out)?.[1]);
  t.ok(v1 >= 1, created.out);
  t.match(await rules(), [{ pattern: 'cli1/*', concurrency: 3, disabled: false, version: v1 }]);

  // A trailing slash is not part of the pattern: the same rule, updated (its limit changed: a new version).
  const updated = await cli('rules', 'set', 'cli1/*/', '--concurrency', '5', '--description', 'first rule', '-y');
  t.equal(updated.code, 0, updated.out);
  t.match(updated.out, `Updated rule 'cli1/*' (version v${v1 + 1})`);

  const list = await cli('rules', 'list');
  t.equal(list.code, 0, list.out);
  t.match(list.out, /PATTERN\s+CONCURRENCY\s+DISABLED/);
  t.match(list.out, /cli1\/\*\s+5\s+no/);
  const wide = await cli('rules', 'list', '-x');
  t.equal(wide.code, 0, wide.out);
  t.match(wide.out, /DESCRIPTION\s+VERSION\s+LAST MODIFIED/);
  t.match(wide.out, new RegExp(`cli1/\\*\\s+5\\s+no\\s+first rule\\s+${v1 + 1}\\s`));

  const unlimited = await cli('rules', 'set', 'cli2', '--disabled', '-y');
  t.equal(unlimited.code, 0, unlimited.out);
  t.match(unlimited.out, /Created rule 'cli2'/);
  t.match((await cli('rules', 'list')).out, /cli2\s+unlimited\s+yes/);

  const disabled = await cli('rules', 'disable', 'cli1/*');
  t.equal(disabled.code, 0, disabled.out);
  t.match(disabled.out, /Rule 'cli1\/\*' disabled/);
  t.match(await rules(), [{ pattern: 'cli1/*', disabled: true, version: v1 + 2, description: 'first rule' }, { pattern: 'cli2' }]);
  const again = await cli('rules', 'disable', 'cli1/*');
  t.equal(again.code, 0, again.out);
  t.match(again.out, /Rule 'cli1\/\*' is already disabled/);
  const enabled = await cli('rules', 'enable', 'cli1/*');
  t.equal(enabled.code, 0, enabled.out);
  t.match(enabled.out, /Rule 'cli1\/\*' enabled/);
  t.match((await cli('rules', 'enable', 'cli1/*')).out, /Rule 'cli1\/\*' is already enabled/);
  t.match(await rules(), [{ pattern: 'cli1/*', disabled: false, version: v1 + 3 }]);

  const deleted = await cli('rules', 'delete', 'cli1/*', '-y');
  t.equal(deleted.code, 0, deleted.out);
  t.match(deleted.out, /Deleted rule 'cli1\/\*'/);
  const gone = await cli('rules', 'delete', 'cli1/*', '-y');
  t.equal(gone.code, 1, gone.out);
  t.match(gone.out, /No rule found with pattern 'cli1\/\*'/);
  t.equal((await cli('rules', 'rm', 'cli2', '-y')).code, 0);
  t.match((await cli('rules', 'ls')).out, /No rules defined\./);
  t.same(await rules(), []);
});

t.test("Keel's own rate and backlog: kept when an update leaves them out (the CLI knows only concurrency), removed with null", async (t) => {
  const made = await put([{ pattern: 'keel-own', limits: { concurrency: 2, rate: { starts: 5, interval_ms: 1000 }, backlog: 9 } }]);
  t.same(made.json[0].limits, { concurrency: 2, rate: { starts: 5, interval_ms: 1000 }, backlog: 9 });
  const viaCli = await cli('rules', 'set', 'keel-own', '--concurrency', '4', '-y');
  t.equal(viaCli.code, 0, viaCli.out);
  const row = (await query(keel, "SELECT concurrency, rate_starts, rate_interval_ms, backlog FROM sys_rules WHERE pattern = 'keel-own'"))[0];
  t.same(row, { concurrency: 4, rate_starts: 5, rate_interval_ms: 1000, backlog: 9 }, 'the CLI changed the concurrency; the rate and backlog stayed');
  const cleared = await put([{ pattern: 'keel-own', limits: { concurrency: 4, rate: null, backlog: null } }]);
  t.same(cleared.json[0].limits, { concurrency: 4 }, 'null removes them');
  await adminCall(keel, 'POST', '/limits/rules/bulk-delete', [{ pattern: 'keel-own' }]);
});

t.test('PUT /limits/rules: shapes, versions, preconditions, all or none', async (t) => {
  const before = Date.now();
  const created = await put([
    { pattern: 'api/*', limits: { concurrency: 2 }, description: 'per tenant', precondition: { type: 'does_not_exist' } },
    { pattern: ' api/t1/ ', unknown_field: 1 },
  ]);
  t.equal(created.status, 200, created.text);
  const v = created.json[0].version;
  t.same(created.json, [
    { pattern: 'api/*', limits: { concurrency: 2 }, description: 'per tenant', disabled: false, version: v, last_modified_millis_since_epoch: created.json[0].last_modified_millis_since_epoch },
    { pattern: 'api/t1', limits: {}, disabled: false, version: v, last_modified_millis_since_epoch: created.json[0].last_modified_millis_since_epoch },
  ], 'in request order, canonical patterns, limits {} when unlimited, no description when none');
  t.ok(created.json[0].last_modified_millis_since_epoch >= before && created.json[0].last_modified_millis_since_epoch <= Date.now());
  t.same(Object.keys(created.json[0]), ['pattern', 'limits', 'description', 'disabled', 'version', 'last_modified_millis_since_epoch']);
  t.match(await rules(), [
    { pattern: 'api/*', concurrency: 2, description: 'per tenant', disabled: false, version: v, last_modified: new Date(created.json[0].last_modified_millis_since_epoch).toISOString() },
    { pattern: 'api/t1', disabled: false, version: v },
  ]);
  t.notOk('concurrency' in (await rules())[1], 'unlimited: concurrency is NULL');

  const exists = await put([{ pattern: 'api/*', precondition: { type: 'does_not_exist' } }]);
  t.equal(exists.status, 409, exists.text);
  t.same(exists.json, { message: `[KEEL0911] rule precondition DoesNotExist for pattern api/* failed (actual version: Some(v${v}))`, restate_code: 'KEEL0911' });
  const stale = await put([{ pattern: 'api/*', precondition: { type: 'matches', version: v + 50 } }]);
  t.equal(stale.status, 409);
  t.equal(stale.json.message, `[KEEL0911] rule precondition Matches(v${v + 50}) for pattern api/* failed (actual version: Some(v${v}))`);
  const absent = await put([{ pattern: 'nope', precondition: { type: 'matches', version: 1 } }]);
  t.equal(absent.status, 409);
  t.match(absent.json.message, /rule precondition Matches\(v1\) for pattern nope failed \(actual version: None\)/);

  // One failed precondition: nothing of the batch is applied.
  const batch = await put([{ pattern: 'atomic1', limits: { concurrency: 1 } }, { pattern: 'api/t1', precondition: { type: 'matches', version: v + 50 } }]);
  t.equal(batch.status, 409);
  t.same((await rules()).map((r) => r.pattern), ['api/*', 'api/t1'], 'atomic1 was not created');

  // A change of limits bumps the rule's version; a description alone, or nothing, keeps it.
  const raised = await put([{ pattern: 'api/*', limits: { concurrency: 4 }, description: 'per tenant', precondition: { type: 'matches', version: v } }], '/v4');
  t.equal(raised.status, 200, raised.text);
  t.match(raised.json, [{ pattern: 'api/*', limits: { concurrency: 4 }, version: v + 1 }]);
  const described = await put([{ pattern: 'api/*', limits: { concurrency: 4 }, description: 'renamed' }], '/v2');
  t.match(described.json, [{ description: 'renamed', version: v + 1, last_modified_millis_since_epoch: raised.json[0].last_modified_millis_since_epoch }]);
  const same = await put([{ pattern: 'api/*', limits: { concurrency: 4 }, description: 'renamed' }]);
  t.same(same.json, described.json, 'an identical upsert changes nothing');
  const off = await put([{ pattern: 'api/*', limits: { concurrency: 4 }, description: 'renamed', disabled: true }]);
  t.match(off.json, [{ disabled: true, version: v + 2 }]);
  t.match(await rules(), [{ pattern: 'api/*', concurrency: 4, description: 'renamed', disabled: true, version: v + 2 }]);

  const none = await put([]);
  t.same([none.status, none.json], [200, []]);
});

t.test('POST /limits/rules/bulk-delete', async (t) => {
  const { json: [rule] } = await put([{ pattern: 'del/*', limits: { concurrency: 1 } }]);
  const absent = await bulkDelete([{ pattern: 'not-there' }]);
  t.same([absent.status, absent.json], [200, []], 'an absent rule without expected_version is skipped');
  const expected = await bulkDelete([{ pattern: 'not-there', expected_version: 12 }]);
  t.equal(expected.status, 409);
  t.equal(expected.json.message, '[KEEL0911] rule precondition Matches(v12) for pattern not-there failed (actual version: None)');
  const mismatch = await bulkDelete([{ pattern: 'api/t1' }, { pattern: 'del/*', expected_version: rule.version + 1 }]);
  t.equal(mismatch.status, 409);
  t.match(mismatch.json.message, `Matches(v${rule.version + 1}) for pattern del/* failed (actual version: Some(v${rule.version}))`);
  t.ok((await rules()).some((r) => r.pattern === 'api/t1'), 'nothing of a refused batch is removed');
  const removed = await bulkDelete([{ pattern: 'del/*/', expected_version: rule.version }, { pattern: 'api/t1' }, { pattern: 'not-there' }], '/v3');
  t.same([removed.status, removed.json], [200, ['del/*', 'api/t1']], 'the canonical patterns actually removed');
  t.same((await rules()).map((r) => r.pattern), ['api/*']);
});

t.test('bodies are refused with 422 KEEL0910 naming the field, in Restate\'s words', async (t) => {
  const prefix = 'Failed to deserialize the JSON body into the target type: ';
  const cases = [
    [[{ pattern: 's1/*', limits: { concurrency: 0 } }], '[0].limits.concurrency: invalid value: integer `0`, expected a nonzero u32'],
    [[{ pattern: 'ok' }, { pattern: 's1/*', limits: { concurrency: -1 } }], '[1].limits.concurrency: invalid value: integer `-1`, expected a nonzero u32'],
    [[{ pattern: 's1', limits: { concurrency: 1.5 } }], '[0].limits.concurrency: invalid type: floating point `1.5`, expected a nonzero u32'],
    [[{ pattern: 's1', limits: { concurrency: '2' } }], '[0].limits.concurrency: invalid type: string "2", expected a nonzero u32'],
    [[{ pattern: 's1', limits: { concurrency: 4294967296 } }], '[0].limits.concurrency: invalid value: integer `4294967296`, expected a nonzero u32'],
    [[{ pattern: 'a/b/c/d' }], '[0].pattern: too many path components (max 3)'],
    [[{ pattern: 'a b' }], '[0].pattern: invalid component: value contains characters outside the allowed set [a-zA-Z0-9_.-]'],
    [[{ pattern: '' }], '[0].pattern: pattern cannot be empty'],
    [[{ pattern: 'x'.repeat(37) }], '[0].pattern: invalid component: value too long: 37 bytes (max 36)'],
    [[{ pattern: 5 }], '[0].pattern: invalid type: integer `5`, expected a string'],
    [[{ limits: {} }], '[0]: missing field `pattern`'],
    [['s1'], '[0]: invalid type: string "s1", expected a map'],
    [{ pattern: 'x' }, 'invalid type: map, expected a sequence'],
    [[{ pattern: 's1', disabled: 'yes' }], '[0].disabled: invalid type: string "yes", expected a boolean'],
    [[{ pattern: 's1', description: 7 }], '[0].description: invalid type: integer `7`, expected a string'],
    [[{ pattern: 's1', precondition: { type: 'sometimes' } }], '[0].precondition: unknown variant `sometimes`, expected one of `none`, `matches`, `does_not_exist`'],
    [[{ pattern: 's1', precondition: { type: 'matches' } }], '[0].precondition: missing field `version`'],
    [[{ pattern: 's1', precondition: {} }], '[0].precondition: missing field `type`'],
  ];
  for (const [body, message] of cases) {
    const r = await put(body);
    t.equal(r.status, 422, JSON.stringify(body));
    t.same(r.json, { message: `[KEEL0910] ${prefix}${message}`, restate_code: 'KEEL0910' }, JSON.stringify(body));
  }
  const del = await bulkDelete([{ pattern: 'x', expected_version: -1 }]);
  t.equal(del.status, 422);
  t.equal(del.json.message, `[KEEL0910] ${prefix}[0].expected_version: invalid value: integer \`-1\`, expected u32`);
  const delMap = await bulkDelete({ pattern: 'x' });
  t.equal(delMap.status, 422);
  t.equal(delMap.json.message, `[KEEL0910] ${prefix}invalid type: map, expected a sequence`);
  const empty = await adminCall(keel, 'PUT', '/limits/rules');
  t.equal(empty.status, 400);
  t.equal(empty.json.restate_code, 'KEEL0001');
  t.same((await rules()).map((r) => r.pattern), ['api/*'], 'nothing refused was applied');
});

t.test('other methods answer 405 with allow, as Restate does', async (t) => {
  for (const [method, url, allow] of [['GET', '/limits/rules', 'PUT'], ['GET', '/v4/limits/rules', 'PUT'], ['POST', '/limits/rules', 'PUT'], ['DELETE', '/v2/limits/rules', 'PUT'], ['GET', '/limits/rules/bulk-delete', 'POST'], ['PUT', '/v4/limits/rules/bulk-delete', 'POST']]) {
    const r = await fetch(keel.admin + url, { method });
    t.equal(r.status, 405, `${method} ${url}`);
    t.equal(r.headers.get('allow'), allow, `${method} ${url}`);
    t.equal(await r.text(), '', `${method} ${url}: no body`);
  }
});

t.test('sys_rules over /query (JSON and Arrow) and the PostgreSQL wire', async (t) => {
  await put([{ pattern: 'sql/*/*', limits: { concurrency: 7 }, description: 'two levels' }]);
  const body = JSON.stringify({ query: "SELECT pattern, concurrency, description, disabled, version, last_modified FROM sys_rules WHERE pattern = 'sql/*/*'" });
  const json = await fetch(`${keel.admin}/v4/query`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json' }, body });
  t.equal(json.status, 200);
  const [row] = (await json.json()).rows;
  t.match(row, { pattern: 'sql/*/*', concurrency: 7, description: 'two levels', disabled: false });
  t.match(row.last_modified, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  const arrow = await fetch(`${keel.admin}/v4/query`, { method: 'POST', headers: { 'content-type': 'application/json', accept: '*/*' }, body });
  t.match(arrow.headers.get('content-type'), /arrow/);
  const table = tableFromIPC(Buffer.from(await arrow.arrayBuffer()));
  t.same(Object.fromEntries(table.schema.fields.map((f) => [f.name, String(f.type)])), {
    pattern: 'Utf8', concurrency: 'Uint32', description: 'Utf8', disabled: 'Bool', version: 'Uint32', last_modified: 'Timestamp<MILLISECOND, +00:00>',
  });
  t.equal(table.get(0).toJSON().concurrency, 7);

  const client = new pg.Client({ host: keel.pgsql.host, port: keel.pgsql.port, user: 'keel', database: 'keel' });
  await client.connect();
  t.teardown(() => client.end());
  const res = await client.query('SELECT pattern, concurrency, description, disabled, version FROM sys_rules WHERE pattern = $1', ['sql/*/*']);
  t.same(res.rows, [{ pattern: 'sql/*/*', concurrency: '7', description: 'two levels', disabled: false, version: String(row.version) }]);
  t.same(res.fields.map((f) => f.dataTypeID), [25, 20, 25, 16, 20], 'text, int8, text, bool, int8');
  const listed = await client.query("SELECT table_name FROM information_schema.tables WHERE table_name = 'sys_rules'");
  t.same(listed.rows, [{ table_name: 'sys_rules' }]);
});

t.test('every change reaches every partition before the answer', async (t) => {
  const version = await bookVersion();
  const versions = await partitionVersions();
  t.equal(versions.length, 8);
  t.same(versions, versions.map(() => version), `every partition holds book v${version}`);
  const r = await put([{ pattern: 'reach', limits: { concurrency: 1 } }]);
  t.same(await partitionVersions(), versions.map(() => r.json[0].version), 'the PUT answered once the partitions had it');
  const d = await bulkDelete([{ pattern: 'reach' }]);
  t.equal(d.status, 200);
  t.same(await partitionVersions(), versions.map(() => r.json[0].version + 1), 'and so did the bulk-delete');
});

t.test('a full book refuses more rules with 422 KEEL0912, through the API and the CLI', async (t) => {
  const have = (await rules()).length;
  const fill = Array.from({ length: 10_000 - have }, (_, i) => ({ pattern: `fill/t${i}`, limits: { concurrency: 1 } }));
  const over = await put([...fill, { pattern: 'fill/one-more' }]);
  t.equal(over.status, 422, over.text.slice(0, 200));
  t.same(over.json, { message: '[KEEL0912] rule book is full (10000 rules)', restate_code: 'KEEL0912' });
  t.equal((await rules()).length, have, 'nothing of it was applied');
  const full = await put(fill);
  t.equal(full.status, 200);
  t.equal(full.json.length, fill.length);
  const viaCli = await cli('rules', 'set', 'cli-extra', '--concurrency', '1', '-y');
  t.equal(viaCli.code, 1, viaCli.out);
  t.match(viaCli.out, /KEEL0912.*rule book is full \(10000 rules\)/);
  t.match(viaCli.out, /422/);
  const emptied = await bulkDelete(fill.map((r) => ({ pattern: r.pattern })));
  t.equal(emptied.status, 200);
  t.equal(emptied.json.length, fill.length);
  t.equal((await rules()).length, have);
});

t.test('the book survives a restart; partitions that missed a change catch up when they open', async (t) => {
  const before = await rules();
  t.ok(before.length >= 2, JSON.stringify(before));
  const version = await bookVersion();
  await keel.restart(); // SIGKILL
  t.same(await rules(), before, 'sys_rules after a restart');
  t.same(await partitionVersions(), Array(8).fill(version));
  const listed = await cli('rules', 'list', '-x');
  t.equal(listed.code, 0, listed.out);
  t.match(listed.out, /api\/\*\s+4\s+yes\s+renamed/);

  // A change committed to the metadata whose append to the partitions never happened (a crash
  // between the two): written here while Keel is down, it reaches the partitions at the start.
  await keel.kill('SIGKILL');
  const { log, records } = await MetaLog.open(path.join(keel.dir, 'data', 'meta'));
  const last = records.findLast((r) => r.kind === 'limit_rules_replaced');
  t.equal(last.book.version, version);
  const rule = { pattern: 'missed/*', concurrency: 9, disabled: false, version: version + 1, last_modified_ms: Date.now() };
  await log.append({ kind: 'limit_rules_replaced', book: { version: version + 1, rules: [...last.book.rules, rule].sort((a, b) => (a.pattern < b.pattern ? -1 : 1)) } });
  await log.close();
  await keel.launch();
  t.same(await partitionVersions(), Array(8).fill(version + 1), 'every partition caught up with the book of the metadata');
  t.match(await rules(), [{ pattern: 'api/*' }, { pattern: 'missed/*', concurrency: 9, version: version + 1 }, { pattern: 'sql/*/*' }]);
  t.same(errorLines(), [], 'nothing was logged at error level');
});
