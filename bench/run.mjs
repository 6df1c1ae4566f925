// Keel vs Restate benchmark: `make bench` → `npm run bench` → `node bench/run.mjs [flags]` (`--help`, bench/README.md).
// One server at a time, each with its own SDK service process:
//   load phase      closed-loop cells, virtual-object cells, the Greeter burst          (scenarios.mjs)
//   lifecycle       startup runs, crash recovery                                       (lifecycle.mjs)
//   log health      error/warn/RT0010 lines of every server log                        (loghealth.mjs)
// then the micro-benchmark (micro.mjs, its own process), the report and the goals check (report.mjs).
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import { dirname, join } from 'node:path';
import { stopGroup } from './children.mjs';
import { BENCH_DIR, LOG_DIR, ROOT, fmt, fmtExit, log, median, pickNode, sleep, tail } from './common.mjs';
import { kafkaCell, startMock } from './kafka.mjs';
import { crashRecovery, startupRuns } from './lifecycle.mjs';
import { logHealth } from './loghealth.mjs';
import { parseArgs } from './options.mjs';
import { sampleCpu } from './proc.mjs';
import { buildTables, checkGoals, ratiosOf, renderMarkdown, renderText } from './report.mjs';
import { combineBurst, combineRows, orderOf } from './rounds.mjs';
import { COUNTER, PROBES, SCENARIOS, closedLoopCell, greeterBurst, objectCell, warmup } from './scenarios.mjs';
import { dataRoot, keelThreads, newServer, probe, register, serverVersion, spawnServer, startService, waitHealthy } from './targets.mjs';
import { retainedAtScale, retainedRun } from './retained.mjs';
import { scalingRun } from './scaling.mjs';
import { sqlAtScale, sqlSideBySide } from './sql.mjs';

const opts = parseArgs(process.argv.slice(2));
const node = pickNode();
mkdirSync(LOG_DIR, { recursive: true });
const startedAt = Date.now();

const meta = {
  date: new Date().toISOString(),
  host: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, memGiB: +(os.totalmem() / 2 ** 30).toFixed(1), loadavg: os.loadavg() },
  orchestratorNode: process.version,
  loadNode: node,
  dataRoot: dataRoot(),
  opts,
};
try {
  meta.loadNodeVersion = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  // Keel runs on the `node` first on PATH (targets.mjs): the pinned Node 24 under npm scripts.
  meta.keelNodeVersion = execFileSync('node', ['--version'], { encoding: 'utf8' }).trim();
  meta.gitCommit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
} catch {
  /* optional */
}

const res = {
  meta,
  scenarioPaths: Object.fromEntries(Object.entries(SCENARIOS).map(([k, v]) => [k, v.path])),
  targets: {}, // target → { status, error?, version?, loadLogs (one a round), idleCpuMsPerSec (median of the rounds)? }
  results: [], // closed-loop cells: { target, scenario, concurrency, ...loadgen result | error }
  objects: [], // object cells: { target, keys, concurrency, ...loadgen result, check | error }
  burst: {}, // target → loadgen result (wallMs)
  rounds: { results: [], objects: [], burst: [] }, // every round's rows (results, objects, burst combine them)
  kafka: {}, // target → kafkaCell result (recordsPerSec, lost, extra)
  startup: {}, // target → { runs, medianMs, maxMs, errors }
  recovery: {}, // target → crashRecovery result
  logs: {}, // target → { phases: {load, startup, recovery, service}, server }
  micro: null,
  sql: {}, // target → sqlSideBySide result (restate, keel)
  sqlScale: null, // sqlAtScale result (Keel only)
  retained: [], // retainedRun results: { target, n, empty, fill, restart, filled, check } | error
  scaling: [], // scalingRun results: { target, workers?, cpuSets: [{ cpus, cores, noop, steps }], ratio } | error
  ratios: [],
  goals: [],
};

const fmtRow = (r) =>
  r.ok === undefined
    ? `ERROR ${r.error ?? r.failed}`
    : `${fmt(r.rps, 1)} req/s p50 ${fmt(r.latencyMs.p50, 2)} ms p99 ${fmt(r.latencyMs.p99, 2)} ms ` +
      `cpu ${fmt(r.cpuMsPerInvocation?.server, 3)} ms/inv ok ${r.ok} errors ${r.errors}` +
      (r.errors ? ` (${Object.entries(r.errorKinds).map(([k, n]) => `${k}×${n}`).join(', ')})` : '');

log(
  `targets=${opts.targets.join(',') || 'none'} scenarios=${opts.scenarios.join(',') || 'none'} c=${opts.concurrency.join(',')} ` +
    `objects=${opts.objectKeys.join(',') || 'none'}@${opts.objectConcurrency.join(',')} burst=${opts.burstCalls ? `${opts.burstCalls}@${opts.burstConcurrency}` : 'none'} ` +
    `kafka=${opts.kafkaRecords || 'none'} startup=${opts.startupRuns} recovery=${opts.recoveryCount} micro=${opts.micro} sql=${opts.sqlInvocations}/${opts.sqlScale} duration=${opts.durationMs / 1000}s node=${meta.loadNodeVersion ?? node}`,
);

/** Closed-loop, object and burst cells of round `round` on one fresh server; its log is one of info.loadLogs. */
async function loadPhase(target, service, round) {
  const info = res.targets[target];
  const raw = res.rounds;
  const notRun = (error) => {
    for (const scenario of opts.scenarios) for (const c of opts.concurrency) raw.results.push({ target, round, scenario, concurrency: c, error });
    for (const keys of target === 'relay' ? [] : opts.objectKeys) for (const c of opts.objectConcurrency) raw.objects.push({ target, round, keys, concurrency: c, error });
    if (opts.burstCalls) raw.burst.push({ target, round, error });
  };
  const s = await newServer(target, { logName: round === 1 ? target : `${target}-round${round}` });
  (info.loadLogs ??= []).push(s.logFile);
  const relay = target === 'relay';
  s.serviceUrl = service.url;
  try {
    spawnServer(s);
    info.startMs = await waitHealthy(s, { timeoutMs: opts.startTimeoutMs, intervalMs: 50 });
    info.version = await serverVersion(s);
    info.pid = s.pid;
    log(`${target}: up (pid ${s.pid}, version ${info.version ?? '?'}, ingress ${s.ingress}, admin ${s.admin})`);
    if (!relay) {
      await register(s, service.url, { timeoutMs: opts.startTimeoutMs });
      log(`${target}: registered ${service.url}`);
    }
  } catch (e) {
    info.status = 'failed';
    info.error = e.message;
    info.logTail = tail(s.logFile);
    log(`${target}: FAILED: ${e.message}${info.logTail ? `\n--- ${s.logFile} (tail)\n${info.logTail}\n---` : ''}`);
    notRun(`server not started: ${e.message}`);
    await stopGroup(s.child);
    if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
    return;
  }

  const probeError = {};
  const wanted = new Set([...opts.scenarios, ...(opts.objectKeys.length && !relay ? ['counter'] : []), ...(opts.burstCalls ? ['greeter'] : [])]);
  for (const p of PROBES.filter((p) => wanted.has(p.name))) {
    try {
      await probe(s, p, { timeoutMs: opts.startTimeoutMs, requestTimeoutMs: opts.requestTimeoutMs });
    } catch (e) {
      probeError[p.name] = e.message;
      log(`${target}: ${e.message}`);
      if (s.child.exited) break;
    }
  }
  if (opts.warmupMs > 0)
    for (const scenario of opts.scenarios.filter((x) => !probeError[x] && !s.child.exited)) {
      log(`${target}: warmup ${scenario} ${opts.warmupMs / 1000}s`);
      await warmup(node, s, SCENARIOS[scenario], opts);
    }

  // Idle baseline: background CPU of the server tree with no load (ms of CPU per second).
  if (opts.idleMs > 0 && !s.child.exited && (opts.scenarios.length || opts.objectKeys.length)) {
    const pids = { server: s.pid };
    const a = sampleCpu(pids);
    const t0 = process.hrtime.bigint();
    await sleep(opts.idleMs);
    const b = sampleCpu(pids);
    if (a.server != null && b.server != null) info.idleCpuMsPerSec = (b.server - a.server) / (Number(process.hrtime.bigint() - t0) / 1e9);
    (info.idleCpuRounds ??= []).push(info.idleCpuMsPerSec ?? null);
    log(`${target}: idle server CPU ${fmt(info.idleCpuMsPerSec, 1)} ms/s`);
  }

  const guard = (name) => (s.child.exited ? `server exited (${fmtExit(s.child.exited)})` : probeError[name]);
  for (const scenario of opts.scenarios)
    for (const c of opts.concurrency) {
      const row = { target, round, scenario, concurrency: c };
      const skip = guard(scenario);
      if (skip) row.error = skip;
      else {
        const r = await closedLoopCell(node, s, service, SCENARIOS[scenario], c, opts, info.idleCpuMsPerSec, { tail: true });
        if (r.failed) row.error = r.failed;
        else Object.assign(row, r);
        if (s.child.exited) row.error = `server exited during the run (${fmtExit(s.child.exited)})`;
      }
      raw.results.push(row);
      log(`${target} ${scenario} c=${c}${rnd(round)}: ${fmtRow(row)}`);
    }
  for (const keys of relay ? [] : opts.objectKeys)
    for (const c of opts.objectConcurrency) {
      const row = { target, round, keys, concurrency: c };
      const skip = guard('counter');
      if (skip) row.error = skip;
      else {
        const r = await objectCell(node, s, service, keys, c, opts, info.idleCpuMsPerSec);
        if (r.failed) row.error = r.failed;
        else Object.assign(row, r);
      }
      raw.objects.push(row);
      log(`${target} ${COUNTER.path} ${keys} key(s) c=${c}${rnd(round)}: ${fmtRow(row)}${row.check ? ` counts ${row.check.pass ? 'ok' : 'WRONG'} (${row.check.matching}/${keys})` : ''}`);
    }
  if (opts.burstCalls) {
    const skip = guard('greeter');
    const r = skip ? { error: skip } : await greeterBurst(node, s, service, opts);
    if (r.failed) r.error = r.failed;
    raw.burst.push({ target, round, ...r });
    log(`${target} greeter burst ${opts.burstCalls}@${opts.burstConcurrency}${rnd(round)}: ${r.ok === undefined ? `ERROR ${r.error}` : `${fmt(r.wallMs / 1000, 2)} s, ${fmtRow(r)}`}`);
  }

  if (s.child.exited) {
    info.status = 'crashed';
    info.error = `exited during the benchmark (${fmtExit(s.child.exited)})`;
    info.logTail = tail(s.logFile);
  }
  await stopGroup(s.child);
  if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
  else log(`${target}: data dir kept at ${s.dataDir}`);
}

/** One Kafka mock cluster for every target (started on first use). */
let kafkaMock;
async function kafkaPhase(target) {
  try {
    kafkaMock ??= await startMock();
  } catch (e) {
    log(`kafka: the mock cluster did not start: ${e.message}`);
    return { target, error: `mock cluster: ${e.message}` };
  }
  return kafkaCell(target, node, kafkaMock.mock, opts);
}

const rnd = (round) => (opts.rounds > 1 ? ` (round ${round})` : '');

// Each target's SDK service, for the whole run (idle while the other targets are measured).
const services = {};
for (const target of opts.targets) {
  const info = (res.targets[target] = { status: 'ok' });
  try {
    services[target] = await startService(node, target);
    log(`${target}: service endpoint at ${services[target].url}`);
  } catch (e) {
    info.status = 'failed';
    info.error = `service: ${e.message}`;
    log(`${target}: FAILED: ${info.error}`);
  }
}

// The load phase, round after round, the targets in turn (forward, then backward, ...).
if (opts.scenarios.length || opts.objectKeys.length || opts.burstCalls) {
  for (let round = 1; round <= opts.rounds; round++)
    for (const target of orderOf(opts.targets, round)) if (services[target]) await loadPhase(target, services[target], round);
  combineRounds();
}

function combineRounds() {
  const cells = (rows, key) => {
    const groups = new Map();
    for (const r of rows) {
      const k = key(r);
      if (!groups.has(k)) groups.set(k, []);
      groups.get(k).push(r);
    }
    return [...groups.values()];
  };
  res.results = cells(res.rounds.results, (r) => `${r.target}/${r.scenario}/${r.concurrency}`).map(combineRows);
  res.objects = cells(res.rounds.objects, (r) => `${r.target}/${r.keys}/${r.concurrency}`).map(combineRows);
  for (const rows of cells(res.rounds.burst, (r) => r.target)) res.burst[rows[0].target] = combineBurst(rows);
  for (const info of Object.values(res.targets)) if (info.idleCpuRounds) info.idleCpuMsPerSec = median(info.idleCpuRounds);
  if (opts.rounds > 1) {
    for (const r of [...res.results, ...res.objects]) log(`${r.target} ${r.scenario ?? `objects-${r.keys}`} c=${r.concurrency}, median of ${opts.rounds} rounds: ${fmtRow(r)}`);
  }
}

// SQL side by side: Keel's default mode against Restate (keel-nofsync answers queries the same way),
// both servers up and their runs interleaved.
const sqlSides = opts.targets.filter((t) => t !== 'keel-nofsync' && t !== 'relay' && services[t]).map((target) => ({ target, service: services[target] }));
if (opts.sqlInvocations > 0 && sqlSides.length > 0) {
  res.sql = await sqlSideBySide(sqlSides, opts);
  for (const [target, r] of Object.entries(res.sql)) {
    log(`${target} sql: ${r.error ? `ERROR ${r.error}` : [...r.commands, ...r.queries].map((c) => `${c.name} ${fmt(c.medianMs, 0)} ms`).join(', ')}`);
  }
}

// Retained state: restate and keel, for each N in turn (one fresh server each).
for (const n of opts.retained) {
  for (const { target, service } of sqlSides) res.retained.push(await retainedRun(target, node, service, n, opts));
}
if (opts.retainedScale > 0 && services.keel) res.retained.push(await retainedAtScale(node, services.keel, opts));

// Scaling: restate and keel, each pinned to one core, then two (one fresh server each).
if (opts.scaling) for (const { target, service } of sqlSides) res.scaling.push(await scalingRun(target, node, service, opts));

for (const target of opts.targets) {
  const info = res.targets[target];
  const service = services[target];
  if (!service) continue;
  const files = { service: service.logFile };
  (info.loadLogs ?? []).forEach((file, i) => (files[i === 0 ? 'load' : `load-${i + 1}`] = file));
  if (target === 'relay') {
    // Load cells only: it has no log to check, nothing to start up, recover or query.
    await stopGroup(service.child);
    continue;
  }
  if (opts.kafkaRecords > 0) {
    res.kafka[target] = await kafkaPhase(target);
    if (res.kafka[target].logFile) files.kafka = res.kafka[target].logFile;
  }
  if (opts.startupRuns > 0) {
    const r = (res.startup[target] = await startupRuns(target, opts));
    files.startup = r.logFile;
    log(`${target}: startup median ${fmt(r.medianMs, 0)} ms, max ${fmt(r.maxMs, 0)} ms (${r.runs.map((v) => v.toFixed(0)).join(', ')})${r.errors.length ? `; errors: ${r.errors.join('; ')}` : ''}`);
  }
  if (opts.recoveryCount > 0) {
    const r = (res.recovery[target] = await crashRecovery(target, node, service, opts));
    files.recovery = r.logFile;
    log(
      `${target}: recovery: restart→healthy ${fmt(r.restartToHealthyMs, 0)} ms, →all ${r.invocations} done ${fmt(r.restartToCompletedMs, 0)} ms, ` +
        `lost ${r.lost ?? '?'}${r.error ? `; ${r.error}` : ''}`,
    );
  }
  if (res.sql[target]) files.sql = res.sql[target].logFile;
  res.retained.filter((r) => r.target === target).forEach((r) => (files[`retained-${r.n}`] = r.logFile));
  await stopGroup(service.child);
  res.logs[target] = logHealth(target, files);
  const l = res.logs[target].server;
  log(`${target}: server log: ${l.errors} errors, ${l.warnings} warnings, ${l.rt0010} RT0010`);
}

await kafkaMock?.close();
if (opts.sqlScale > 0 && opts.targets.includes('keel')) {
  log(`sql at scale: Keel with ${opts.sqlScale} invocations`);
  const r = (res.sqlScale = await sqlAtScale(node, opts));
  log(`sql at scale: ${r.error ? `ERROR ${r.error}` : [...r.commands, ...r.queries].map((c) => `${c.name} ${fmt(c.medianMs, 0)} ms`).join(', ')}`);
}

if (opts.micro) {
  log('micro-benchmark (fold, append+fold)');
  res.micro = await runMicro();
}

async function runMicro() {
  const out = join(LOG_DIR, 'micro.json');
  rmSync(out, { force: true });
  const args = [join(BENCH_DIR, 'micro.mjs'), '--json', out, '--invocations', String(opts.microInvocations), '--duration', String(opts.microDurationMs / 1000), '--batches', opts.microBatches.join(',')];
  const code = await new Promise((r) => {
    const c = spawn(node, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    c.on('close', r);
  });
  try {
    return JSON.parse(readFileSync(out, 'utf8'));
  } catch {
    return { error: `bench/micro.mjs failed (exit ${code})` };
  }
}

// ---------------------------------------------------------------- ratios, goals, report

for (const r of res.results.filter((r) => r.target !== 'restate')) {
  const base = res.results.find((b) => b.target === 'restate' && b.scenario === r.scenario && b.concurrency === r.concurrency);
  res.ratios.push({ scenario: r.scenario, concurrency: r.concurrency, target: r.target, ...ratiosOf(r, base) });
}
for (const r of res.objects.filter((r) => r.target !== 'restate')) {
  const base = res.objects.find((b) => b.target === 'restate' && b.keys === r.keys && b.concurrency === r.concurrency);
  res.ratios.push({ scenario: `objects-${r.keys}`, concurrency: r.concurrency, target: r.target, ...ratiosOf(r, base) });
}
if (opts.targets.length) res.goals = checkGoals(res);
meta.elapsedS = (Date.now() - startedAt) / 1000;

const tables = buildTables(res);
const headline =
  `Keel vs Restate — ${meta.host.cpus} CPUs (${meta.host.cpuModel ?? '?'}), load avg at start ${meta.host.loadavg.map((v) => v.toFixed(2)).join(' ')}; ` +
  `${opts.durationMs / 1000} s per cell after ${opts.runWarmupMs / 1000} s warmup (and ${opts.warmupMs / 1000} s per scenario on each fresh server), closed loop, ${opts.rounds > 1 ? `median of ${opts.rounds} rounds (targets in turn)` : 'one round'}; Keel on ${meta.keelNodeVersion ?? 'node'}, service and load on ${meta.loadNodeVersion ?? node}; ` +
  `data dirs in ${meta.dataRoot}; took ${fmt(meta.elapsedS, 0)} s`;
const targetLines = opts.targets.map((t) => {
  const i = res.targets[t];
  return `${t}: ${i.status}${i.version ? ` (version ${i.version})` : ''}${t.startsWith('keel') ? `, worker.threads ${keelThreads()}${keelThreads() === '1' ? ' (every partition on one event loop)' : keelThreads() === 'auto' ? ' (a thread per core from 4 cores, else one event loop)' : ''}` : ''}${i.idleCpuMsPerSec != null ? `, idle server CPU ${fmt(i.idleCpuMsPerSec, 1)} ms/s` : ''}${i.error ? ` — ${i.error}` : ''}`;
});
const legend = 'Ratios are Keel ÷ Restate for the same cell ("vs R"): throughput > 1 and p50/p99/CPU < 1 mean Keel is better.';
console.log(`\n${headline}\n${targetLines.join('\n')}\n${legend}${renderText(tables)}\n`);

mkdirSync(dirname(opts.out), { recursive: true });
writeFileSync(opts.out, JSON.stringify(res, null, 2) + '\n');
const md = opts.out.replace(/\.json$/, '') + '.md';
writeFileSync(
  md,
  renderMarkdown([...tables.filter((t) => t.id === 'goals'), ...tables.filter((t) => t.id !== 'goals')], [
    `# Keel vs Restate — ${meta.date}${meta.gitCommit ? ` (${meta.gitCommit})` : ''}`,
    '',
    headline + '.',
    '',
    ...targetLines.map((l) => `- ${l}`),
    '',
    legend,
  ]),
);
log(`results written to ${opts.out} and ${md}`);
process.exit(0);
