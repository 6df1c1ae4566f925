// Retained state (`--retained N,...`): what a server costs for what it keeps, not for what it does. Per target
// (restate, keel) and N, on one fresh server:
//   1. empty: noop and object (Counter/add over 100 keys) cells at c=32; RSS; then a SIGKILL and a restart as in 3
//      (RSS and time to the first answer of the empty server, to compare 3 with)
//   2. fill: N virtual objects with 8 KiB of state each (Store/{key}/put, c=32), then N invocations sleeping for
//      an hour (Bench/sleepy/send), until all N are suspended; RSS and the data dir's size
//   3. SIGKILL the process group, start it again on the same data dir: restart → first answered call (a read of
//      a retained object, Store/k0/size, polled every 10 ms), RSS 2 s after that answer
//   4. filled: the same noop and object cells, round by round with a second, empty server of the same target
//      started now (what filled ÷ empty compares); every object still 8 KiB, every sleeper still suspended
// Each noop/object cell runs --rounds times (3) in turn; the median of each figure is reported.
// RSS is the server's own process (Keel's query engine, a child started by the first SQL query, is shown apart).
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { crashGroup, stopGroup } from './children.mjs';
import { ROOT, httpCall, log, nowMs, sleep, sqlQuery } from './common.mjs';
import { groupPids, sampleCpu } from './proc.mjs';
import { COUNTER, SCENARIOS, runLoad } from './scenarios.mjs';
import { combineRows } from './rounds.mjs';
import { newServer, probe, register, spawnServer, waitHealthy } from './targets.mjs';

const STATE_BYTES = 8192;
const SLEEP_MS = 3_600_000;
const CELL_KEYS = 100;

/** Resident memory of a process in MB: all of it, and its anonymous (owned) and file-backed (mapped files) parts. */
function residentMb(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const mb = (field) => {
      const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(status);
      return m ? Number(m[1]) / 1024 : null;
    };
    return { rss: mb('VmRSS'), anon: mb('RssAnon'), file: mb('RssFile') };
  } catch {
    return { rss: null, anon: null, file: null };
  }
}

/**
 * The server process's memory, and the RSS of the rest of its process group (Keel's query engine).
 * `anonMb` is what the process owns; `fileMb` is pages of files it maps, which the kernel takes back
 * when it needs them: LevelDB reads its tables through mmap, so a scan of a large store shows up
 * there (RocksDB, Restate's store, reads into its own block cache instead: anonymous memory).
 */
function memory(s) {
  const own = residentMb(s.pid);
  const others = groupPids(s.pid).filter((p) => p !== s.pid).reduce((sum, p) => sum + (residentMb(p).rss ?? 0), 0);
  return { rssMb: own.rss, anonMb: own.anon, fileMb: own.file, childrenRssMb: others };
}

/**
 * Waits until the server's process tree uses under 10% of a core over a second (at most 120 s): what it
 * does after a start (Keel's query engine loading its copy, compactions) is over before cells measure it.
 */
async function settle(s) {
  return quiet([s], 1, 120_000);
}

/**
 * Waits until each of `servers`' process trees used under 10% of a core in each of the last `seconds`
 * seconds (at most `maxMs`); returns the ms waited.
 */
async function quiet(servers, seconds, maxMs) {
  const t0 = nowMs();
  const pids = Object.fromEntries(servers.map((s, i) => [i, s.pid]));
  let last = sampleCpu(pids);
  let calm = 0;
  while (nowMs() - t0 < maxMs && calm < seconds) {
    await sleep(1000);
    const now = sampleCpu(pids);
    const busy = Object.keys(pids).some((i) => now[i] == null || last[i] == null || now[i] - last[i] >= 100);
    calm = busy ? 0 : calm + 1;
    last = now;
  }
  return nowMs() - t0;
}

/**
 * Before each cell of a pair: what a server does after a cell (Keel's query engine applies the cell's
 * changes up to 5 s later, LevelDB and RocksDB compact what it wrote) is over, so that it does not land
 * in the other server's cell. Longer than Keel's idle flush of changes to its query engine (5 s).
 */
const CELL_QUIET_S = 6;
const CELL_QUIET_MAX_MS = 30_000;

const dirMb = (dir) => Number(execFileSync('du', ['-sk', dir], { encoding: 'utf8' }).split('\t')[0]) / 1024;

const cellSpec = (s, service, opts) => ({
  concurrency: 32,
  warmupMs: 1000,
  durationMs: opts.retainedDurationMs,
  requestTimeoutMs: opts.requestTimeoutMs,
  pids: { server: s.pid, service: service.child.pid },
});
const hardLimitMs = (opts) => 1000 + opts.retainedDurationMs + 2 * opts.requestTimeoutMs + 15000;

/** One cell (noop or object) on `s`, one round. */
async function cell(node, kind, s, service, opts, tag, round) {
  const spec = cellSpec(s, service, opts);
  const load =
    kind === 'noop'
      ? { ...spec, url: s.ingress + SCENARIOS.noop.path, body: SCENARIOS.noop.body, expect: SCENARIOS.noop.expect }
      : { ...spec, url: s.ingress + COUNTER.path, body: COUNTER.body, keys: CELL_KEYS, keyPrefix: `${tag}-` };
  return { ...(await runLoad(node, load, hardLimitMs(opts))), round };
}

const pick = (r) =>
  r.failed || r.error
    ? { error: r.error ?? r.failed }
    : { rps: r.rps, p50: r.latencyMs?.p50, p99: r.latencyMs?.p99, errors: r.errors, cpuMsPerInvocation: r.cpuMsPerInvocation?.server, ...(r.rounds ? { roundsRps: r.rounds.map((x) => x.rps) } : {}) };

/**
 * The cells on each of `servers` ({s, tag}) --rounds times: within a round, each cell on every
 * server back to back (the servers in turn, in the other order the next round), so the two runs
 * a ratio compares are seconds apart; the median of each figure. Each cell --rounds times: one
 * 5 s run of the same empty cell measured 1,584 and 1,948 noop/s here, more than the 10% being
 * judged, and the same filled cell 1,264 and 1,719 in two rounds a minute apart.
 */
async function cells(node, servers, service, opts) {
  const rows = servers.map(() => ({ noop: [], object: [] }));
  for (let round = 1; round <= Math.max(1, opts.rounds); round++) {
    const order = servers.map((_, i) => (round % 2 === 1 ? i : servers.length - 1 - i));
    for (const kind of ['noop', 'object']) {
      for (const i of order) {
        if (servers.length > 1) await quiet(servers.map((x) => x.s), CELL_QUIET_S, CELL_QUIET_MAX_MS);
        rows[i][kind].push(await cell(node, kind, servers[i].s, service, opts, servers[i].tag, round));
      }
    }
  }
  return rows.map((r) => ({ noop: pick(combineRows(r.noop)), object: pick(combineRows(r.object)) }));
}

/**
 * Filled ÷ empty per round (the two runs of a round are back to back), for each cell: the
 * median of these is what the goal judges, since the machine's drift between rounds (±20%)
 * cancels within a pair but not between the medians of two columns.
 */
export function pairedRatios(filled, empty) {
  const out = {};
  for (const kind of ['noop', 'object']) {
    const f = filled[kind].roundsRps ?? [filled[kind].rps];
    const e = empty[kind].roundsRps ?? [empty[kind].rps];
    out[kind] = f.map((x, i) => (x != null && e[i] ? x / e[i] : null)).filter((x) => x != null);
  }
  return out;
}

/**
 * The filled server's cells, round by round against a second, empty server of the same target
 * started now (`out.filled`, `out.emptyPaired`): the empty phase ran minutes before, and the
 * machine's throughput drifts by more than the 10% judged in between.
 */
async function pairedCells(node, s, service, opts, logName, out) {
  const e = await newServer(s.target, { logName });
  try {
    await startRegistered(e, service, opts);
    await settle(e);
    const [filled, empty] = await cells(node, [{ s, tag: 'filled' }, { s: e, tag: 'empty2' }], service, opts);
    out.filled = { ...filled, ...memory(s) };
    out.emptyPaired = empty;
    out.pairedRatios = pairedRatios(filled, empty);
  } finally {
    await stopGroup(e.child);
    rmSync(e.dataDir, { recursive: true, force: true });
  }
}

async function countSuspended(s) {
  const rows = await sqlQuery(s.admin, "SELECT status, count(*) AS n FROM sys_invocation WHERE target_handler_name = 'sleepy' GROUP BY status", 60_000);
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
}

async function fill(node, s, n, opts) {
  const put = await runLoad(
    node,
    { url: `${s.ingress}/Store/{key}/put`, body: JSON.stringify({ bytes: STATE_BYTES }), expect: 'true', keys: n, keyPrefix: 'k', concurrency: 32, total: n, requestTimeoutMs: opts.requestTimeoutMs },
    n * 100 + 120_000,
  );
  if (put.failed || put.errors) throw new Error(`filling objects: ${put.failed ?? `${put.errors} errors ${JSON.stringify(put.errorSamples ?? [])}`}`);
  const send = await runLoad(
    node,
    { url: `${s.ingress}/Bench/sleepy/send`, body: JSON.stringify({ ms: SLEEP_MS }), expect: 'invocationId', concurrency: 32, total: n, requestTimeoutMs: opts.requestTimeoutMs },
    n * 100 + 120_000,
  );
  if (send.failed || send.errors) throw new Error(`sending sleepers: ${send.failed ?? `${send.errors} errors`}`);
  const deadline = Date.now() + 60_000 + n * 5;
  let by = {};
  while (Date.now() < deadline) {
    by = await countSuspended(s).catch(() => by);
    if ((by.suspended ?? 0) >= n) break;
    await sleep(1000);
  }
  if ((by.suspended ?? 0) < n) throw new Error(`only ${by.suspended ?? 0} of ${n} sleepers suspended: ${JSON.stringify(by)}`);
  return { objectsWallMs: put.wallMs, sleepersWallMs: send.wallMs };
}

/** SIGKILL, start again: spawn → the first call reading Store/k0 answered with `bytes`; RSS 2 s later. */
async function crashAndRestart(s, opts, bytes) {
  await crashGroup(s.child);
  spawnServer(s);
  const out = { toFirstAnswerMs: await firstAnswer(s, opts, bytes) };
  await sleep(2000);
  return { ...out, ...memory(s) };
}

async function firstAnswer(s, opts, bytes) {
  const deadline = Date.now() + opts.startTimeoutMs * 4;
  while (Date.now() < deadline) {
    if (s.child.exited) throw new Error('the server exited after the restart');
    const r = await httpCall('POST', `${s.ingress}/Store/k0/size`, { body: {}, timeoutMs: 2000 }).catch(() => ({}));
    if (r.status === 200 && r.text === String(bytes)) return nowMs() - s.spawnedAt;
    await sleep(10);
  }
  throw new Error('no answer within the start timeout after the restart');
}

/** Starts `s`, registers the service with it, and waits for its first answered call. */
async function startRegistered(s, service, opts) {
  spawnServer(s);
  await waitHealthy(s, { timeoutMs: opts.startTimeoutMs });
  await register(s, service.url, { timeoutMs: opts.startTimeoutMs });
  await probe(s, SCENARIOS.noop, { timeoutMs: opts.startTimeoutMs, requestTimeoutMs: opts.requestTimeoutMs });
}

/** Start, register, first call; the empty server's cells, then its SIGKILL and restart: what the filled one is compared with. */
async function emptyPhase(s, node, service, opts, out) {
  await startRegistered(s, service, opts);
  out.empty = { ...(await cells(node, [{ s, tag: 'empty' }], service, opts))[0], ...memory(s) };
  out.emptyRestart = await crashAndRestart(s, opts, 0);
  out.emptyRestart.settleMs = await settle(s);
}

export async function retainedRun(target, node, service, n, opts) {
  const out = { target, n };
  const s = await newServer(target, { logName: `${target}-retained-${n}` });
  out.logFile = s.logFile;
  try {
    await emptyPhase(s, node, service, opts, out);
    log(
      `${target} retained ${n}: empty ${out.empty.noop.rps?.toFixed(0)} noop/s, ${out.empty.object.rps?.toFixed(0)} object/s, RSS ${out.empty.rssMb?.toFixed(0)} MB; ` +
        `restarted empty: first answer ${out.emptyRestart.toFirstAnswerMs.toFixed(0)} ms, RSS ${out.emptyRestart.rssMb?.toFixed(0)} MB; filling`,
    );
    const t0 = nowMs();
    out.fill = { ...(await fill(node, s, n, opts)), wallMs: nowMs() - t0, ...memory(s), dataMb: dirMb(s.dataDir) };
    log(`${target} retained ${n}: filled in ${(out.fill.wallMs / 1000).toFixed(0)} s, RSS ${out.fill.rssMb?.toFixed(0)} MB, data ${out.fill.dataMb.toFixed(0)} MB; SIGKILL and restart`);
    out.restart = await crashAndRestart(s, opts, STATE_BYTES);
    out.restart.settleMs = await settle(s);
    out.restart.settled = memory(s);
    await pairedCells(node, s, service, opts, `${target}-retained-${n}-empty`, out);
    const last = await httpCall('POST', `${s.ingress}/Store/k${n - 1}/size`, { body: {}, timeoutMs: opts.requestTimeoutMs });
    const by = await countSuspended(s);
    out.check = { lastObjectBytes: Number(last.text), suspended: by.suspended ?? 0, pass: last.text === String(STATE_BYTES) && (by.suspended ?? 0) === n };
    log(
      `${target} retained ${n}: restart → first answer ${out.restart.toFirstAnswerMs.toFixed(0)} ms, RSS ${out.restart.rssMb?.toFixed(0)} MB; ` +
        `filled ${out.filled.noop.rps?.toFixed(0)} noop/s, ${out.filled.object.rps?.toFixed(0)} object/s; check ${out.check.pass ? 'ok' : JSON.stringify(out.check)}`,
    );
  } catch (e) {
    out.error = e.message;
    log(`${target} retained ${n}: ERROR ${e.message}`);
  } finally {
    await stopGroup(s.child);
    if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
  }
  return out;
}

// ---------------------------------------------------------------- Keel alone at scale (--retained-scale)
// A fill over HTTP of a million objects and a million sleepers takes most of an hour on 2 cores, so the store is
// built in-process instead, through the partition processors (the same commands the ingress and the invoker
// append: the same store), into a server that was started empty, registered and stopped. Then: spawn → first
// answer, RSS, and the noop and object cells on it, against the same server before the build.

export async function retainedAtScale(node, service, opts) {
  const n = opts.retainedScale;
  const out = { target: 'keel', n, scale: true };
  const s = await newServer('keel', { logName: `keel-retained-scale-${n}` });
  out.logFile = s.logFile;
  try {
    await emptyPhase(s, node, service, opts, out);
    await stopGroup(s.child);
    const t0 = nowMs();
    await buildStore(node, s.dataDir, n);
    out.fill = { wallMs: nowMs() - t0, dataMb: dirMb(s.dataDir), inProcess: true };
    log(`keel retained ${n} (at scale): store built in ${(out.fill.wallMs / 1000).toFixed(0)} s, data ${out.fill.dataMb.toFixed(0)} MB; starting on it`);
    spawnServer(s);
    out.restart = { toFirstAnswerMs: await firstAnswer(s, { ...opts, startTimeoutMs: 600_000 }, STATE_BYTES) };
    await sleep(2000);
    Object.assign(out.restart, memory(s));
    out.restart.settleMs = await settle(s);
    out.restart.settled = memory(s);
    await pairedCells(node, s, service, opts, `keel-retained-scale-${n}-empty`, out);
    const last = await httpCall('POST', `${s.ingress}/Store/k${n - 1}/size`, { body: {}, timeoutMs: opts.requestTimeoutMs });
    const partitions = JSON.parse((await httpCall('GET', `${s.admin}/partitions`, { timeoutMs: 10_000 })).text);
    const suspended = (partitions.partitions ?? partitions).reduce((sum, p) => sum + (p.invocations?.suspended ?? 0), 0);
    out.check = { lastObjectBytes: Number(last.text), suspended, pass: last.text === String(STATE_BYTES) && suspended === n };
    log(
      `keel retained ${n} (at scale): start → first answer ${out.restart.toFirstAnswerMs.toFixed(0)} ms, RSS ${out.restart.rssMb?.toFixed(0)} MB; ` +
        `filled ${out.filled.noop.rps?.toFixed(0)} noop/s, ${out.filled.object.rps?.toFixed(0)} object/s; check ${out.check.pass ? 'ok' : JSON.stringify(out.check)}`,
    );
  } catch (e) {
    out.error = e.message;
    log(`keel retained ${n} (at scale): ERROR ${e.message}`);
  } finally {
    await stopGroup(s.child);
    if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
  }
  return out;
}

function buildStore(node, dir, n) {
  return new Promise((resolveBuild, reject) => {
    const c = spawn(node, [fileURLToPath(import.meta.url), '--build-store', dir, String(n)], { stdio: ['ignore', 'inherit', 'inherit'] });
    c.on('close', (code) => (code === 0 ? resolveBuild() : reject(new Error(`building the store failed (exit ${code})`))));
  });
}

/** N Store/k{i}/put (8 KiB set, then done) and N Bench/sleepy asleep for an hour, folded into `dir`'s worker store. */
async function storeBuilder(dir, n) {
  const dist = resolve(process.env.BENCH_KEEL_DIST ?? join(ROOT, 'dist'));
  const load = (p) => import(pathToFileURL(join(dist, p)).href);
  const [store, groupWriter, processor, commands, messages, ids, logger, config] = await Promise.all([
    load('storage/store.js'), load('storage/group-writer.js'), load('partition/processor.js'), load('log/commands.js'),
    load('protocol/messages.js'), load('common/ids.js'), load('common/logger.js'), load('config/index.js'),
  ]);
  const defaults = config.loadConfig(undefined, {}).worker;
  const partitions = defaults.partitions;
  const logRetained = defaults.storage_db.log_retained_records;
  const db = await store.openWorkerStore(join(dir, 'worker'));
  const writer = new groupWriter.GroupWriter(db);
  const partitionOf = (pk) => Number((pk * BigInt(partitions)) >> 64n);
  const procs = await Promise.all(
    Array.from({ length: partitions }, (_, p) =>
      // The log trimmed as the server trims it: a store left with millions of records to trim
      // would make the server's first start do that work instead.
      processor.PartitionProcessor.open(db, writer, p, { fsync: false, effects: { execute() {} }, logger: logger.silentLogger, owns: (key) => partitionOf(key) === p, log_retained_records: logRetained }),
    ),
  );
  const { MessageType, encode, pb } = messages;
  const at = { deployment_id: 'dp_bench', protocol_version: 6 };
  const blob = Buffer.from(JSON.stringify('x'.repeat(STATE_BYTES)));
  const setState = Buffer.from(encode(pb.SetState, { key: Buffer.from('blob'), value: { content: blob } }));
  const output = Buffer.from(encode(pb.Output, { value: { content: Buffer.from('true') } }));
  const wake = Date.now() + SLEEP_MS;
  const sleepEntry = Buffer.from(encode(pb.Sleep, { wake_up_time: wake, result_completion_id: 1 }));
  const put = (id, key) => [
    { kind: 'invoke', invoke: { invocation_id: id, service: 'Store', handler: 'put', key, input: Buffer.from('{}'), headers: [], service_type: 'VirtualObject', handler_type: 'Exclusive' } },
    { kind: 'journal_append', journal_append: { invocation_id: id, epoch: 0, entry_type: MessageType.SetStateCommand, entry: setState, ...at } },
    { kind: 'journal_append', journal_append: { invocation_id: id, epoch: 0, entry_type: MessageType.OutputCommand, entry: output, ...at } },
    { kind: 'attempt_ended', attempt_ended: { invocation_id: id, epoch: 0, outcome: commands.Outcome.END } },
  ];
  const sleeper = (id) => [
    { kind: 'invoke', invoke: { invocation_id: id, service: 'Bench', handler: 'sleepy', key: '', input: Buffer.from(JSON.stringify({ ms: SLEEP_MS })), headers: [], service_type: 'Service' } },
    { kind: 'journal_append', journal_append: { invocation_id: id, epoch: 0, entry_type: MessageType.SleepCommand, entry: sleepEntry, ...at } },
    { kind: 'attempt_ended', attempt_ended: { invocation_id: id, epoch: 0, outcome: commands.Outcome.SUSPENDED, waiting_completions: [1] } },
  ];
  const WINDOW = 2048;
  const t0 = Date.now();
  for (let done = 0; done < n; ) {
    const batch = Math.min(WINDOW, n - done);
    const appends = [];
    for (let i = done; i < done + batch; i++) {
      const obj = ids.InvocationId.random(ids.objectPartitionKey('Store', `k${i}`));
      for (const c of put(obj.bytes, `k${i}`)) appends.push(procs[partitionOf(obj.partitionKey)].append(c));
      const nap = ids.InvocationId.random(ids.randomPartitionKey());
      for (const c of sleeper(nap.bytes)) appends.push(procs[partitionOf(nap.partitionKey)].append(c));
    }
    await Promise.all(appends);
    done += batch;
    if (done % 100_000 < WINDOW) console.error(`[bench retained] store: ${done} objects and sleepers (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  }
  await Promise.all(procs.map((p) => p.close()));
  await db.close();
}

if (process.argv[2] === '--build-store') {
  await storeBuilder(process.argv[3], Number(process.argv[4]));
  process.exit(0);
}
