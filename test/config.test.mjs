// Configuration: defaults, TOML file, KEEL_ env overrides, RT0002 errors naming file, line and
// key; and the real server refusing to start (RT0002, RT0004, RT0005) or starting on Node 20.
import t from 'tap';
import { spawn, execFileSync } from 'node:child_process';
import pg from 'pg';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { autoThreads, loadConfig } from '../dist/config/index.js';
import { KeelError } from '../dist/errors/index.js';
import { startKeel, serveServices, register, ingress, tempDir, freePort } from './helpers/keel.mjs';
import { greeter } from '../examples/greeter/greeter.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const MAIN = path.join(root, 'dist/main.js');

function writeToml(t, text, name = 'keel.toml') {
  const file = path.join(tempDir(t), name);
  fs.writeFileSync(file, text);
  return file;
}

/** loadConfig must throw a KeelError RT0002 whose message matches every pattern. */
function rt0002(t, f, patterns, what) {
  try {
    f();
    t.fail(`${what}: no error`);
  } catch (err) {
    t.ok(err instanceof KeelError, `${what}: a KeelError (${err?.message})`);
    t.equal(err.code, 'RT0002', `${what}: RT0002`);
    for (const p of patterns) t.match(err.message, p, `${what}: names ${p}`);
  }
}

const expectedDefaults = {
  base_dir: './keel-data',
  ingress: { bind_address: '0.0.0.0:8080', request_size_limit_bytes: 32 * 1024 * 1024, auth_tokens: [] },
  admin: { bind_address: '0.0.0.0:9070', auth_tokens: [], discovery_timeout_ms: 10_000 },
  http: { idle_timeout_ms: 60_000, header_timeout_ms: 10_000, request_timeout_ms: 300_000, max_connections: 10_000, max_header_size_bytes: 64 * 1024, max_header_count: 200 },
  meta: { storage_path: path.join('./keel-data', 'meta') },
  worker: {
    storage_db: { path: path.join('./keel-data', 'worker'), fsync: true },
    invoker: {
      inactivity_timeout_ms: 60_000,
      abort_timeout_ms: 600_000,
      message_size_limit_bytes: 32 * 1024 * 1024,
      connect_timeout_ms: 5_000,
      request_identity_private_key_pem_file: undefined,
      request_identity_expiration_ms: 60_000,
    },
  },
  default_retry_policy: { initial_interval_ms: 500, exponentiation_factor: 2, max_interval_ms: 60_000, max_attempts: 70, on_max_attempts: 'pause' },
  default_journal_retention_ms: 86_400_000,
  tracing: { endpoint: undefined },
};

t.test('defaults without a file', async (t) => {
  const c = loadConfig(undefined, {});
  t.match(c, expectedDefaults);
  t.equal(c.meta.storage_path, 'keel-data/meta');
  t.equal(c.worker.storage_db.path, 'keel-data/worker');
  t.ok(Number.isInteger(c.worker.partitions) && c.worker.partitions >= 1);
});

t.test('the shipped config.toml states the same defaults', async (t) => {
  t.match(loadConfig(path.join(root, 'config.toml'), {}), expectedDefaults);
});

t.test('timeouts beyond what a timer holds (24 days) are RT0002, not a timer that fires at once', async (t) => {
  rt0002(t, () => loadConfig(undefined, { KEEL_WORKER__INVOKER__ABORT_TIMEOUT: '30d' }), [/KEEL_WORKER__INVOKER__ABORT_TIMEOUT/, /at most 24 days/], 'abort_timeout 30d');
  rt0002(t, () => loadConfig(writeToml(t, '[http]\nidle_timeout = "99999999d"\n'), {}), [/:2/, /http\.idle_timeout/, /at most 24 days/], 'http.idle_timeout');
  t.equal(loadConfig(undefined, { KEEL_WORKER__INVOKER__ABORT_TIMEOUT: '24d' }).worker.invoker.abort_timeout_ms, 24 * 86_400_000);
  t.equal(loadConfig(undefined, { KEEL_DEFAULT_JOURNAL_RETENTION: '365d' }).default_journal_retention_ms, 365 * 86_400_000, 'retentions are not timers');
});

t.test('a TOML file overrides keys; paths follow base_dir', async (t) => {
  const file = writeToml(
    t,
    `base_dir = "/srv/keel"
[ingress]
bind_address = "127.0.0.1:18080"
[worker]
partitions = 3
[worker.invoker]
inactivity_timeout = "10s"
message_size_limit = "1MiB"
[default_retry_policy]
initial_interval = "250ms"
max_attempts = 5
on_max_attempts = "kill"
`,
  );
  const c = loadConfig(file, {});
  t.equal(c.base_dir, '/srv/keel');
  t.equal(c.meta.storage_path, '/srv/keel/meta');
  t.equal(c.worker.storage_db.path, '/srv/keel/worker');
  t.equal(c.ingress.bind_address, '127.0.0.1:18080');
  t.equal(c.admin.bind_address, '0.0.0.0:9070', 'keys not in the file keep their defaults');
  t.equal(c.worker.partitions, 3);
  t.equal(c.worker.invoker.inactivity_timeout_ms, 10_000);
  t.equal(c.worker.invoker.abort_timeout_ms, 600_000);
  t.equal(c.worker.invoker.message_size_limit_bytes, 1024 * 1024);
  t.match(c.default_retry_policy, { initial_interval_ms: 250, max_attempts: 5, on_max_attempts: 'kill', max_interval_ms: 60_000 });
});

t.test('KEEL_ environment variables win over the file', async (t) => {
  const file = writeToml(t, `[ingress]\nbind_address = "0.0.0.0:1234"\n[worker.invoker]\nabort_timeout = "5m"\n`);
  const c = loadConfig(file, {
    KEEL_INGRESS__BIND_ADDRESS: '127.0.0.1:18080',
    KEEL_WORKER__INVOKER__ABORT_TIMEOUT: '30s',
    KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: 'unlimited',
    KEEL_WORKER__STORAGE_DB__FSYNC: 'false',
    KEEL_WORKER__STORAGE_DB__WRITE_BUFFER_SIZE: '8MiB',
    KEEL_BASE_DIR: '/data',
    PATH: '/usr/bin',
  });
  t.equal(c.ingress.bind_address, '127.0.0.1:18080');
  t.equal(c.worker.invoker.abort_timeout_ms, 30_000);
  t.equal(c.default_retry_policy.max_attempts, undefined);
  t.equal(c.worker.storage_db.fsync, false);
  t.equal(c.worker.storage_db.path, '/data/worker');
  t.equal(c.worker.storage_db.write_buffer_size_bytes, 8 * 1024 * 1024);
  t.equal(loadConfig(undefined, {}).worker.storage_db.write_buffer_size_bytes, 32 * 1024 * 1024, 'default');
});

t.test("cluster.auth_token[_file]: the cluster's own tokens, the first sent between nodes, all accepted", async (t) => {
  const brokers = { KEEL_CLUSTER__BROKERS: '127.0.0.1:9092' };
  t.same(loadConfig(undefined, brokers).cluster.auth_tokens, [], 'none by default');
  const dir = t.testdir({ tokens: '# rotated monthly\nnew-token\n\nold-token\n' });
  const c = loadConfig(undefined, { ...brokers, KEEL_CLUSTER__AUTH_TOKEN: 'inline', KEEL_CLUSTER__AUTH_TOKEN_FILE: path.join(dir, 'tokens') });
  t.same(c.cluster.auth_tokens, ['inline', 'new-token', 'old-token']);
  t.throws(() => loadConfig(undefined, { ...brokers, KEEL_CLUSTER__AUTH_TOKEN: 'has space' }), /cluster\.auth_token\[_file\]': a token must be visible ASCII/);
  t.throws(() => loadConfig(undefined, { ...brokers, KEEL_CLUSTER__AUTH_TOKEN_FILE: path.join(dir, 'missing') }), /cluster\.auth_token_file.*cannot read/);
});

t.test('worker.threads: auto by default (one below 4 cores), a count, at most one per partition; a cluster node takes 1 or auto (one)', async (t) => {
  const cores = os.availableParallelism();
  const dflt = loadConfig(undefined, {});
  t.equal(dflt.worker.threads, cores >= 4 ? Math.min(cores, dflt.worker.partitions) : 1, `auto by default (${cores} cores here)`);
  const limits = { partitions: 8, clustered: false, concurrent_invocations_limit: 1000 };
  t.same([1, 2, 3, 4, 6, 8, 16, 64].map((n) => autoThreads(n, limits)), [1, 1, 1, 4, 6, 8, 8, 8], 'auto by cores: one below 4, then a thread per core, at most one per partition');
  t.equal(autoThreads(16, { ...limits, concurrent_invocations_limit: 3 }), 3, 'auto: no more threads than concurrent_invocations_limit (each has one slot at least)');
  t.equal(autoThreads(16, { ...limits, clustered: true }), 1, 'auto on a cluster node: one');
  t.equal(loadConfig(undefined, { KEEL_WORKER__THREADS: '1' }).worker.threads, 1, 'one: every partition on the main event loop');
  t.equal(loadConfig(undefined, { KEEL_WORKER__THREADS: '3' }).worker.threads, 3);
  t.equal(loadConfig(undefined, { KEEL_WORKER__THREADS: '64', KEEL_WORKER__PARTITIONS: '4' }).worker.threads, 4, 'more threads than partitions: one per partition');
  t.equal(loadConfig(undefined, { KEEL_WORKER__THREADS: 'auto', KEEL_WORKER__PARTITIONS: '64' }).worker.threads, cores >= 4 ? cores : 1, 'auto: the cores this process may use');
  t.equal(loadConfig(writeToml(t, '[worker]\nthreads = 2\n'), {}).worker.threads, 2);
  t.equal(loadConfig(writeToml(t, '[worker]\nthreads = "auto"\npartitions = 1\n'), {}).worker.threads, 1);
  for (const bad of ['0', 'many', '-1', '1.5']) rt0002(t, () => loadConfig(undefined, { KEEL_WORKER__THREADS: bad }), [/KEEL_WORKER__THREADS/, /expected "auto" or a positive integer/], `threads '${bad}'`);
  rt0002(t, () => loadConfig(undefined, { KEEL_WORKER__THREADS: '2', KEEL_CLUSTER__BROKERS: 'localhost:9092' }), [/'worker\.threads' is 2/, /cluster node needs worker\.threads = 1 \(or auto\)/], 'threads in a cluster');
  const clustered = loadConfig(undefined, { KEEL_WORKER__THREADS: 'auto', KEEL_WORKER__PARTITIONS: '64', KEEL_CLUSTER__BROKERS: 'localhost:9092' });
  t.equal(clustered.worker.threads, 1, 'auto on a cluster node: one (the same file serves both kinds of node)');
  t.ok(clustered.cluster !== undefined);
});

t.test('tracing.endpoint: off by default, set from the file or KEEL_TRACING__ENDPOINT', async (t) => {
  t.equal(loadConfig(undefined, {}).tracing.endpoint, undefined);
  const file = writeToml(t, `[tracing]\nendpoint = "http://collector:4318"\n`);
  t.equal(loadConfig(file, {}).tracing.endpoint, 'http://collector:4318');
  t.equal(loadConfig(file, { KEEL_TRACING__ENDPOINT: 'https://otel.example/v1/traces' }).tracing.endpoint, 'https://otel.example/v1/traces');
});

t.test('bad values: RT0002 naming the file, the line and the key, or the variable', async (t) => {
  const bad = [
    [`[ingress]\nbind_address = "nope"\n`, 2, 'ingress.bind_address'],
    [`base_dir = "x"\n\n[worker.invoker]\n# comment\ninactivity_timeout = "ten seconds"\n`, 5, 'worker.invoker.inactivity_timeout'],
    [`[worker]\npartitions = 0\n`, 2, 'worker.partitions'],
    [`[worker.invoker]\nmessage_size_limit = "lots"\n`, 2, 'worker.invoker.message_size_limit'],
    [`[default_retry_policy]\non_max_attempts = "explode"\n`, 2, 'default_retry_policy.on_max_attempts'],
    [`[default_retry_policy]\nmax_attempts = -1\n`, 2, 'default_retry_policy.max_attempts'],
    [`[tracing]\nendpoint = "localhost:4318"\n`, 2, 'tracing.endpoint'],
  ];
  for (const [text, line, key] of bad) {
    const file = writeToml(t, text);
    rt0002(t, () => loadConfig(file, {}), [file, new RegExp(`:${line}\\b`), key], key);
  }
  const envBad = [
    ['KEEL_WORKER__INVOKER__ABORT_TIMEOUT', 'soon', 'worker.invoker.abort_timeout'],
    ['KEEL_INGRESS__BIND_ADDRESS', '127.0.0.1:99999', 'ingress.bind_address'],
    ['KEEL_WORKER__PARTITIONS', 'many', 'worker.partitions'],
    ['KEEL_TRACING__ENDPOINT', 'grpc://collector:4317', 'tracing.endpoint'],
  ];
  for (const [name, value, key] of envBad) {
    rt0002(t, () => loadConfig(undefined, { [name]: value }), [name, key], name);
  }
  // The env error wins even when the file is fine, and names the variable, not the file.
  const good = writeToml(t, `[worker]\npartitions = 2\n`);
  rt0002(t, () => loadConfig(good, { KEEL_WORKER__PARTITIONS: '-3' }), ['KEEL_WORKER__PARTITIONS'], 'env over file');
});

t.test('unknown keys, unknown variables and TOML syntax errors are RT0002', async (t) => {
  const unknown = writeToml(t, `[worker]\npartitions = 2\nfoo = 1\n`);
  rt0002(t, () => loadConfig(unknown, {}), [unknown, /:3\b/, 'worker.foo'], 'unknown key');
  const unknownTable = writeToml(t, `[ingres]\nbind_address = "127.0.0.1:1"\n`);
  rt0002(t, () => loadConfig(unknownTable, {}), [unknownTable, 'ingres.bind_address'], 'misspelt table');
  rt0002(t, () => loadConfig(undefined, { KEEL_INGRES__BIND_ADDRESS: '127.0.0.1:1' }), ['KEEL_INGRES__BIND_ADDRESS'], 'unknown variable');
  const syntax = writeToml(t, `[worker]\npartitions = = 2\n`);
  rt0002(t, () => loadConfig(syntax, {}), [syntax, /:2\b/], 'syntax error');
  rt0002(t, () => loadConfig('/nonexistent/keel.toml', {}), ['/nonexistent/keel.toml'], 'missing file');
});

/** Runs `node dist/main.js` to its exit; resolves { code, signal, output }. */
function runKeel(t, { args = [], env = {}, cwd, nodePath = process.execPath, timeout_ms = 20_000 } = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(nodePath, [MAIN, ...args], {
      cwd: cwd ?? tempDir(t),
      env: { PATH: process.env.PATH, HOME: process.env.HOME, KEEL_LOG__FORMAT: 'json', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    proc.stdout.on('data', (d) => (output += d));
    proc.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`keel did not exit within ${timeout_ms} ms:\n${output}`));
    }, timeout_ms);
    proc.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, output });
    });
  });
}

async function loopbackEnv(t) {
  const dir = tempDir(t);
  return {
    dir,
    env: {
      KEEL_BASE_DIR: path.join(dir, 'data'),
      KEEL_INGRESS__BIND_ADDRESS: `127.0.0.1:${await freePort()}`,
      KEEL_ADMIN__BIND_ADDRESS: `127.0.0.1:${await freePort()}`,
      KEEL_ADMIN__QUERY_ENGINE__PGSQL_BIND_ADDRESS: `127.0.0.1:${await freePort()}`,
    },
  };
}

t.test('the server refuses a bad configuration file with RT0002', async (t) => {
  const { dir, env } = await loopbackEnv(t);
  const bad = path.join(dir, 'bad.toml');
  fs.writeFileSync(bad, `[worker.invoker]\nabort_timeout = "forever"\n`);
  const r = await runKeel(t, { args: ['--config', bad], env, cwd: dir });
  t.not(r.code, 0, 'non-zero exit');
  t.match(r.output, /RT0002/);
  t.match(r.output, /bad\.toml:2/);
  t.match(r.output, /worker\.invoker\.abort_timeout/);
  t.notMatch(r.output, /keel is ready/);
  // And a bad variable.
  const r2 = await runKeel(t, { env: { ...env, KEEL_WORKER__PARTITIONS: 'zero' }, cwd: dir });
  t.not(r2.code, 0);
  t.match(r2.output, /RT0002/);
  t.match(r2.output, /KEEL_WORKER__PARTITIONS/);
});

t.test('RT0004: the ingress port is already bound', async (t) => {
  const blocker = net.createServer();
  await new Promise((r) => blocker.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => blocker.close(r)));
  const { env } = await loopbackEnv(t);
  const taken = `127.0.0.1:${blocker.address().port}`;
  const r = await runKeel(t, { env: { ...env, KEEL_INGRESS__BIND_ADDRESS: taken } });
  t.not(r.code, 0, 'non-zero exit');
  t.match(r.output, /RT0004/);
  t.match(r.output, new RegExp(taken.replace(/\./g, '\\.')));
  t.notMatch(r.output, /keel is ready/);
  // The admin port too.
  const r2 = await runKeel(t, { env: { ...env, KEEL_ADMIN__BIND_ADDRESS: taken } });
  t.not(r2.code, 0);
  t.match(r2.output, /RT0004/);
  // And the PostgreSQL port.
  const r3 = await runKeel(t, { env: { ...env, KEEL_ADMIN__QUERY_ENGINE__PGSQL_BIND_ADDRESS: taken } });
  t.not(r3.code, 0);
  t.match(r3.output, /RT0004/);
  t.match(r3.output, /pgsql/);
  t.notMatch(r3.output, /keel is ready/);
});

t.test('RT0005: a second Keel on the same data directory', async (t) => {
  const keel = await startKeel(t);
  const { env } = await loopbackEnv(t);
  const r = await runKeel(t, { env: { ...env, KEEL_BASE_DIR: path.join(keel.dir, 'data') } });
  t.not(r.code, 0, 'non-zero exit');
  t.match(r.output, /RT0005/);
  t.notMatch(r.output, /keel is ready/);
  // The first one is unharmed.
  t.equal(keel.proc.exitCode, null);
  const res = await fetch(`${keel.admin}/health`);
  t.equal(res.status, 200);
});

/** The first `node` on PATH that is not in a node_modules/.bin (npm scripts put the pinned one first). */
function systemNode() {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir || dir.includes('node_modules')) continue;
    const candidate = path.join(dir, 'node');
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.realpathSync(candidate) !== fs.realpathSync(process.execPath)) return candidate;
    } catch {}
  }
  return fs.existsSync('/usr/bin/node') ? '/usr/bin/node' : undefined;
}

t.test('the server runs on the system Node (20) and serves the Greeter', async (t) => {
  const nodePath = systemNode();
  t.ok(nodePath, 'a system node exists');
  const version = execFileSync(nodePath, ['--version']).toString().trim();
  t.not(version, process.version, `a different node than the pinned one (${version} vs ${process.version})`);
  t.ok(Number(version.slice(1).split('.')[0]) >= 20, `Node >= 20 (${version})`);
  const keel = await startKeel(t, { nodePath });
  await register(keel, await serveServices(t, [greeter]));
  const r = await ingress(keel, '/Greeter/greet', { name: 'Node20' });
  t.equal(r.status, 200, JSON.stringify(r.body));
  t.same(r.body, { result: 'You said hi to Node20!' });

  // The second start reads the code cache the first one wrote; on Node 20 such a script has lost
  // its dynamic-import callback, and the packages loaded on first use (prom-client, pg-gateway,
  // @fastify/send) must still load.
  const bundleDir = path.join(root, 'dist/bundle');
  // The cache of this bundle (its size and time name it): one of an earlier build may be there too.
  const bundle = fs.statSync(path.join(bundleDir, 'keel.cjs'));
  const cached = () => fs.existsSync(path.join(bundleDir, `keel.cjs.${version}.${bundle.size}.${Math.round(bundle.mtimeMs)}.v8cache`));
  for (const deadline = Date.now() + 15_000; !cached() && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 200));
  t.ok(cached(), `a code cache for ${version} was written`);
  await keel.stop();
  await keel.launch();
  const ready = keel.output.split('\n').filter((l) => l.includes('keel is ready')).map((l) => JSON.parse(l)).at(-1);
  t.equal(ready.code_cache, 'used', 'the second start read the code cache');
  const metrics = await fetch(`${keel.admin}/metrics`);
  t.equal(metrics.status, 200, 'prom-client loads');
  t.match(await metrics.text(), /keel_invocations_completed_total/);
  const client = new pg.Client({ host: keel.pgsql.host, port: keel.pgsql.port, user: 'keel', database: 'keel' });
  await client.connect();
  t.teardown(() => client.end().catch(() => {}));
  const rows = (await client.query("SELECT count(*)::INT AS n FROM sys_invocation WHERE target_service_name = 'Greeter'")).rows;
  t.same(rows, [{ n: 1 }], 'pg-gateway loads: the completed Greeter call is there');
  const ui = await fetch(`${keel.admin}/ui/`);
  t.equal(ui.status, 200, '@fastify/send loads: the admin UI is served');
  t.match(await ui.text(), /<html/i);
  t.equal(keel.logLines('RT0006').length, 0, 'no internal error logged');
});

t.test('the system Node (20) runs partition threads too: the bundled thread entry, the shared store', async (t) => {
  const nodePath = systemNode();
  const keel = await startKeel(t, { nodePath, env: { KEEL_WORKER__THREADS: '2', KEEL_WORKER__PARTITIONS: '4' } });
  const started = keel.output.split('\n').find((l) => l.includes('partition threads started'));
  t.same(JSON.parse(started).partitions_per_thread, [2, 2], 'two threads, two partitions each');
  await register(keel, await serveServices(t, [greeter]));
  const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => ingress(keel, '/Greeter/greet', { name: `n${i}` })));
  t.ok(answers.every((r, i) => r.status === 200 && r.body.result === `You said hi to n${i}!`), 'twelve calls answered');
  const metrics = await (await fetch(`${keel.admin}/metrics`)).text();
  t.match(metrics, /keel_invocations_completed_total\{service="Greeter",handler="greet",outcome="succeeded"\} 12/, 'counted by both threads together');
  t.equal(keel.logLines('RT0006').length, 0, 'no internal error logged');
});
