// SQL scenario: how fast the restate CLI's queries answer, and what they cost.
//   side by side (--sql N, default 20000): per target a fresh server and N Bench/noop calls (retained as completed
//     invocations); then, with every target's server up, each restate-CLI command --sql-runs times (the CLI binary's
//     wall time, median) and the CLI's verbatim queries on POST /query (the server's answer time, median), the
//     targets' runs interleaved.
//   Keel at scale (--sql-scale N, default 1000000; Keel only): a store of N completed invocations built in-process
//     through the partition processors (no HTTP; `node bench/sql.mjs --build-store DIR N`), Keel started on it,
//     the query engine's copy loaded (its own log line), then `restate invocations ls`, `ls --all`,
//     `sql "select count(*) …"` and POST /query count(*), with the RSS of Keel and of its query engine.
import { execFile, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import * as os from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { stopGroup } from './children.mjs';
import { ROOT, httpCall, log, median, nowMs, waitFor } from './common.mjs';
import { newServer, register, spawnServer, waitHealthy } from './targets.mjs';

const CLI = (() => {
  const direct = join(ROOT, 'node_modules', '@restatedev', `restate-${os.platform()}-${os.arch()}`, 'bin', 'restate');
  return existsSync(direct) ? direct : join(ROOT, 'node_modules', '.bin', 'restate');
})();

/** Runs the restate CLI against `admin`; resolves { ms, code, out }. */
function cli(admin, args, home) {
  return new Promise((done) => {
    const t0 = nowMs();
    execFile(CLI, args, {
      env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: admin, RESTATE_CLI_CONFIG_HOME: home, CI: '1', NO_COLOR: '1', TERM: 'dumb' },
      timeout: 120_000,
      maxBuffer: 64 * 1024 * 1024,
    }, (err, stdout, stderr) => done({ ms: nowMs() - t0, code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) }));
  });
}

/**
 * The restate CLI commands timed. `ids`: recent invocations; a command about one invocation is
 * about another one in each run (as a user describes one, then the next: nothing of the last run
 * can be reused for the text of this one).
 */
const COMMANDS = (ids) => [
  { name: 'sql count(*)', args: ['sql', 'select count(*) from sys_invocation'] },
  { name: 'invocations ls', args: ['invocations', 'list'] },
  { name: 'invocations ls --all', args: ['invocations', 'list', '--all'] },
  { name: 'invocations ls --all --service --handler', args: ['invocations', 'list', '--all', '--service', 'Bench', '--handler', 'noop'] },
  { name: 'invocations describe', args: (run) => ['invocations', 'describe', ids[run % ids.length]] },
  { name: 'services status', args: ['services', 'status'] },
  { name: 'services status Bench', args: ['services', 'status', 'Bench'] },
];

/** The CLI's own SQL (reference/restate-cli-admin-api.md), as it sends it; `ids` as for COMMANDS (others than theirs). */
const QUERIES = (ids) => [
  { name: 'ls: count (Arrow)', arrow: true, sql: "SELECT COUNT(1) FROM (SELECT\n            *\n        FROM sys_invocation inv\n        LIMIT 50000\n        )\n        WHERE status != 'completed'" },
  { name: 'ls --all: count (Arrow)', arrow: true, sql: 'SELECT COUNT(1) FROM (SELECT\n            *\n        FROM sys_invocation inv\n        LIMIT 50000\n        )' },
  { name: 'ls --all: id page', sql: 'SELECT\n            id\n        FROM sys_invocation inv\n        ORDER BY inv.created_at DESC, inv.id\n        LIMIT 100' },
  { name: 'describe: lookup', sql: (run) => `SELECT\n            id\n        FROM sys_invocation inv\n        WHERE inv.id = '${ids[run % ids.length]}'\n        \n        LIMIT 1` },
  { name: 'describe: detail', sql: (run) => `SELECT\n            inv.id,\n            inv.target,\n            inv.target_service_ty,\n            inv.idempotency_key,\n            inv.status,\n            inv.created_at,\n            inv.modified_at as state_modified_at,\n            inv.pinned_deployment_id,\n            inv.retry_count as num_retries,\n            inv.last_failure as last_failure_message,\n            inv.last_failure_related_entry_index as last_failure_entry_index,\n            inv.last_failure_related_entry_name as last_failure_entry_name,\n            inv.last_failure_related_entry_type as last_failure_entry_ty,\n            inv.last_attempt_deployment_id,\n            inv.last_attempt_server,\n            inv.next_retry_at,\n            inv.last_start_at,\n            inv.invoked_by_id,\n            inv.invoked_by_target,\n            inv.trace_id,\n            inv.completion_result,\n            inv.completion_failure,\n            dp.id IS NOT NULL as pinned_deployment_exists\n        FROM sys_invocation inv\n        LEFT JOIN sys_deployment dp ON dp.id = inv.pinned_deployment_id\n        WHERE inv.id = '${ids[run % ids.length]}' AND inv.id in ('${ids[run % ids.length]}')\n        ORDER BY inv.created_at DESC, inv.id` },
  { name: 'describe: probe (Arrow)', arrow: true, sql: "SELECT COUNT(*) FROM information_schema.columns\n            WHERE\n                table_name = 'sys_journal'\n                AND column_name IN ('version', 'entry_json', 'appended_at')" },
  { name: 'describe: journal', sql: (run) => `SELECT\n            sj.index,\n            sj.entry_type,\n            sj.completed,\n            sj.invoked_id,\n            sj.invoked_target,\n            sj.sleep_wakeup_at,\n            sj.name,\n            sj.promise_name,\n            sj.version, sj.entry_json, sj.appended_at\n        FROM sys_journal sj\n        WHERE\n            sj.id = '${ids[run % ids.length]}'\n        ORDER BY index DESC\n        LIMIT 100` },
  { name: 'services status: summary', sql: "SELECT\n                target_service_name,\n                target_handler_name,\n                status,\n                COUNT(1) as num_invocations,\n                MIN(created_at) as oldest_at,\n                FIRST_VALUE(id ORDER BY created_at ASC) as oldest_invocation\n            FROM sys_invocation\n            WHERE target_service_name IN ('Bench')\n            GROUP BY target_service_name, target_handler_name, status\n            ORDER BY target_handler_name" },
  { name: 'sql count(*) (Arrow)', arrow: true, sql: 'select count(*) from sys_invocation' },
];

/** Run `i` of a query: the server's answer time, and what to report of it. */
async function queryOnce(admin, q, i) {
  const t0 = nowMs();
  const r = await httpCall('POST', `${admin}/query`, { body: { query: typeof q.sql === 'function' ? q.sql(i) : q.sql }, headers: { accept: q.arrow ? '*/*' : 'application/json' }, timeoutMs: 120_000 });
  return { ms: nowMs() - t0, extra: { status: r.status } };
}

/** Run `i` of a CLI command: its wall time, and what to report of it. */
async function commandOnce(admin, c, i, home) {
  const r = await cli(admin, typeof c.args === 'function' ? c.args(i) : c.args, home);
  return { ms: r.ms, extra: { code: r.code, ...(r.code !== 0 ? { output: r.out.slice(0, 500) } : {}) } };
}

/** `runs` runs of `once` (queryOnce or commandOnce): the median, every time, the last run's report. */
async function timeRuns(name, runs, once) {
  const times = [];
  let last;
  for (let i = 0; i < runs; i++) {
    last = await once(i);
    times.push(last.ms);
  }
  return { name, medianMs: median(times), runs: times, ...last?.extra };
}

/** N calls to Bench/noop at concurrency C (keep-alive), each answer checked. */
async function fill(s, n, concurrency = 64) {
  let next = 0;
  let failed = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      const r = await httpCall('POST', `${s.ingress}/Bench/noop`, { body: { name: 'sql' }, timeoutMs: 30_000 });
      if (r.status !== 200) failed++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return failed;
}

async function sqlRows(admin, sql, timeoutMs = 120_000) {
  const r = await httpCall('POST', `${admin}/query`, { body: { query: sql }, headers: { accept: 'application/json' }, timeoutMs });
  if (r.status !== 200) throw new Error(`query ${r.status}: ${r.text.slice(0, 200)}`);
  return JSON.parse(r.text).rows;
}

/** One target's server, started and filled with `opts.sqlInvocations` retained invocations; `out.error` if that failed. */
async function prepareSide(target, service, opts) {
  const s = await newServer(target, { logName: `${target}-sql` });
  const out = { target, invocations: opts.sqlInvocations, logFile: s.logFile };
  const side = { target, s, out, home: join(s.dataDir, 'cli-home') };
  try {
    spawnServer(s);
    await waitHealthy(s, { timeoutMs: opts.startTimeoutMs, intervalMs: 50 });
    await register(s, service.url, { timeoutMs: opts.startTimeoutMs });
    await waitFor(`${target} first call`, async () => ((await httpCall('POST', `${s.ingress}/Bench/noop`, { body: {}, timeoutMs: 5000 })).status === 200 ? { ok: true } : {}), {
      deadline: Date.now() + opts.startTimeoutMs,
      child: s.child,
      intervalMs: 300,
    });
    const t0 = nowMs();
    out.failedCalls = await fill(s, opts.sqlInvocations - 1);
    out.fillS = (nowMs() - t0) / 1000;
    // Restate's ingress answers before the status is visible to queries; both must show every call.
    await waitFor(`${target} ${opts.sqlInvocations} invocations visible`, async () => {
      const [row] = await sqlRows(s.admin, 'SELECT count(*) AS n FROM sys_invocation');
      out.retained = Number(row.n ?? Object.values(row)[0]);
      return out.retained >= opts.sqlInvocations - out.failedCalls ? { ok: true } : { why: `${out.retained} visible` };
    }, { deadline: Date.now() + 120_000, child: s.child, intervalMs: 500 });
    const ids = (await sqlRows(s.admin, `SELECT id FROM sys_invocation ORDER BY created_at DESC LIMIT ${2 * opts.sqlRuns}`)).map((r) => r.id);
    side.commands = COMMANDS(ids.slice(0, opts.sqlRuns));
    side.queries = QUERIES(ids.slice(opts.sqlRuns));
    log(`${target} sql: ${out.retained} invocations retained (filled in ${out.fillS.toFixed(1)} s)`);
  } catch (e) {
    out.error = e.message;
  }
  return side;
}

/**
 * The targets side by side: each one's server started and filled in turn, then every CLI command
 * and query timed on all of them alive, their runs interleaved (run i: the targets in order, run
 * i + 1: in reverse), so that what the machine does meanwhile weighs on each alike. `sides`:
 * [{ target, service }]; resolves with target → { commands, queries, ... } (each with medianMs).
 */
export async function sqlSideBySide(sides, opts) {
  const ready = [];
  for (const { target, service } of sides) ready.push(await prepareSide(target, service, opts));
  const live = ready.filter((side) => side.out.error === undefined);
  try {
    if (live.length > 0) log(`sql: ${live.map((side) => side.target).join(' and ')} interleaved, ${opts.sqlRuns} runs of each command and query`);
    for (const side of live) Object.assign(side.out, { commands: [], queries: [] });
    const timeAll = async (kind, once) => {
      for (let j = 0; j < live[0]?.[kind].length; j++) {
        const runs = new Map(live.map((side) => [side, []]));
        const last = new Map();
        for (let i = 0; i < opts.sqlRuns; i++) {
          for (const side of i % 2 === 0 ? live : [...live].reverse()) {
            const r = await once(side, side[kind][j], i);
            runs.get(side).push(r.ms);
            last.set(side, r);
          }
        }
        for (const side of live) side.out[kind].push({ name: side[kind][j].name, medianMs: median(runs.get(side)), runs: runs.get(side), ...last.get(side).extra });
      }
    };
    await timeAll('commands', (side, c, i) => commandOnce(side.s.admin, c, i, side.home));
    await timeAll('queries', (side, q, i) => queryOnce(side.s.admin, q, i));
  } catch (e) {
    for (const side of live) side.out.error = e.message;
  } finally {
    for (const side of ready) {
      await stopGroup(side.s.child);
      if (!opts.keepDirs) rmSync(side.s.dataDir, { recursive: true, force: true });
    }
  }
  return Object.fromEntries(ready.map((side) => [side.target, side.out]));
}

// ---------------------------------------------------------------- Keel at scale

/** Resident memory of a process, in MB (0 when it is gone). */
function rssMb(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** The query engine: the child of Keel's process running engine-main.js. */
function enginePid(keelPid) {
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) !== keelPid) continue;
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('engine-main.js')) return Number(p);
    } catch {}
  }
  return undefined;
}

/** The node process running dist/main.js in the server's process group (the spawned one may be a wrapper). */
function keelPid(s) {
  try {
    if (readFileSync(`/proc/${s.pid}/cmdline`, 'utf8').includes('main.js')) return s.pid;
  } catch {}
  return s.pid;
}

function dirSizeMb(dir) {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    total += e.isDirectory() ? dirSizeMb(p) * 1024 * 1024 : statSync(p).size;
  }
  return total / (1024 * 1024);
}

/** Builds the store in a child process (`--build-store`), so its memory is not the orchestrator's. */
function buildStore(node, dir, n) {
  return new Promise((resolveBuild, reject) => {
    const c = spawn(node, [join(ROOT, 'bench', 'sql.mjs'), '--build-store', dir, String(n)], { stdio: ['ignore', 'inherit', 'inherit'] });
    c.on('close', (code) => (code === 0 ? resolveBuild() : reject(new Error(`building the store failed (exit ${code})`))));
  });
}

export async function sqlAtScale(node, opts) {
  const n = opts.sqlScale;
  const s = await newServer('keel', { logName: 'keel-sql-scale' });
  const out = { invocations: n, logFile: s.logFile };
  const home = join(s.dataDir, 'cli-home');
  try {
    const t0 = nowMs();
    await buildStore(node, s.dataDir, n);
    out.buildS = (nowMs() - t0) / 1000;
    out.storeMb = dirSizeMb(join(s.dataDir, 'worker'));
    log(`keel sql at scale: store of ${n} invocations built in ${out.buildS.toFixed(0)} s (${out.storeMb.toFixed(0)} MB)`);
    spawnServer(s);
    out.readyMs = await waitHealthy(s, { timeoutMs: 600_000, intervalMs: 100 });
    const main = keelPid(s);
    // The first query starts the engine (admin.query_engine.idle_timeout) and waits for its copy.
    const q0 = nowMs();
    await sqlRows(s.admin, 'SELECT count(*) AS n FROM sys_invocation', 900_000);
    out.firstQueryS = (nowMs() - q0) / 1000;
    await waitFor('the query engine copy', async () => {
      const line = readFileSync(s.logFile, 'utf8').split('\n').find((l) => l.includes('copy of the invocation statuses loaded'));
      if (!line) return { why: 'loading' };
      const j = JSON.parse(line.slice(line.indexOf('{')));
      out.engineLoadMs = j.load_ms;
      out.engineCopied = j.invocations;
      return { ok: true };
    }, { deadline: Date.now() + 900_000, child: s.child, intervalMs: 500 });
    out.copyReadyS = (nowMs() - s.spawnedAt) / 1000;
    const engine = enginePid(main);
    out.rssAfterLoadMb = { keel: rssMb(main), engine: engine ? rssMb(engine) : null };
    log(`keel sql at scale: ready ${(out.readyMs / 1000).toFixed(1)} s after spawn; the first query answered in ${out.firstQueryS.toFixed(1)} s (engine copy of ${out.engineCopied} loaded in ${(out.engineLoadMs / 1000).toFixed(1)} s)`);
    const ids = (await sqlRows(s.admin, `SELECT id FROM sys_invocation ORDER BY created_at DESC LIMIT ${2 * opts.sqlRuns}`)).map((r) => r.id);
    out.commands = [];
    for (const c of COMMANDS(ids.slice(0, opts.sqlRuns)).filter((c) => ['invocations ls', 'invocations ls --all', 'sql count(*)', 'invocations describe'].includes(c.name))) {
      out.commands.push(await timeRuns(c.name, opts.sqlRuns, (i) => commandOnce(s.admin, c, i, home)));
    }
    out.queries = [];
    for (const q of [{ name: 'count(*) (JSON)', sql: 'SELECT count(*) FROM sys_invocation' }, ...QUERIES(ids.slice(opts.sqlRuns))]) {
      out.queries.push(await timeRuns(q.name, opts.sqlRuns, (i) => queryOnce(s.admin, q, i)));
    }
    out.rssAfterQueriesMb = { keel: rssMb(main), engine: engine ? rssMb(engine) : null };
    const engineDir = readdirSync(join(s.dataDir, 'query')).find((d) => d.startsWith('engine-'));
    if (engineDir) out.engineDirMb = dirSizeMb(join(s.dataDir, 'query', engineDir));
  } catch (e) {
    out.error = e.message;
  } finally {
    await stopGroup(s.child);
    if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
  }
  return out;
}

// ---------------------------------------------------------------- the store builder (a process of its own)

async function storeBuilder(dir, n) {
  const dist = resolve(process.env.BENCH_KEEL_DIST ?? join(ROOT, 'dist'));
  const load = (p) => import(pathToFileURL(join(dist, p)).href);
  const [store, groupWriter, processor, commands, messages, ids, logger] = await Promise.all([
    load('storage/store.js'), load('storage/group-writer.js'), load('partition/processor.js'), load('log/commands.js'),
    load('protocol/messages.js'), load('common/ids.js'), load('common/logger.js'),
  ]);
  const PARTITIONS = 8; // Keel's default worker.partitions
  const DAY_MS = 86_400_000;
  const db = await store.openWorkerStore(join(dir, 'worker'));
  const writer = new groupWriter.GroupWriter(db);
  const partitionOf = (pk) => Number((pk * BigInt(PARTITIONS)) >> 64n);
  const procs = await Promise.all(
    Array.from({ length: PARTITIONS }, (_, p) =>
      processor.PartitionProcessor.open(db, writer, p, { fsync: false, effects: { execute() {} }, logger: logger.silentLogger, owns: (key) => partitionOf(key) === p }),
    ),
  );
  const input = Buffer.from(JSON.stringify({ name: 'sql' }));
  const output = Buffer.from(messages.encode(messages.pb.Output, { value: { content: Buffer.from('{"ok":true,"name":"sql"}') } }));
  /** invoke → Output → END: one completed Bench/noop invocation, as the ingress and the invoker append them. */
  const lifecycle = (id) => [
    { kind: 'invoke', invoke: { invocation_id: id, service: 'Bench', handler: 'noop', key: '', input, headers: [], service_type: 'Service', completion_retention_ms: DAY_MS, journal_retention_ms: DAY_MS } },
    { kind: 'journal_append', journal_append: { invocation_id: id, epoch: 0, entry_type: messages.MessageType.OutputCommand, entry: output, deployment_id: 'dp_bench', protocol_version: 6 } },
    { kind: 'attempt_ended', attempt_ended: { invocation_id: id, epoch: 0, outcome: commands.Outcome.END } },
  ];
  const WINDOW = 4096; // invocations in flight at once
  const t0 = Date.now();
  for (let done = 0; done < n; ) {
    const batch = Math.min(WINDOW, n - done);
    const appends = [];
    for (let i = 0; i < batch; i++) {
      const id = ids.InvocationId.random(ids.randomPartitionKey());
      const p = procs[partitionOf(id.partitionKey)];
      for (const c of lifecycle(id.bytes)) appends.push(p.append(c));
    }
    await Promise.all(appends);
    done += batch;
    if (done % 100_000 < WINDOW) console.error(`[bench sql] store: ${done} invocations (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  }
  await Promise.all(procs.map((p) => p.close()));
  await db.close();
}

if (process.argv[2] === '--build-store') {
  await storeBuilder(process.argv[3], Number(process.argv[4]));
  process.exit(0);
}
