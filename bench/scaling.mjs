// Scaling (`--scaling`, issue 23): what a second core buys each server. Per target (restate, keel) and per
// CPU set of the server process (taskset: core 0, then cores 0-1), one fresh server: noop and steps at c=32,
// --rounds times in turn (the median reported), and 2-core ÷ 1-core throughput per scenario. Keel's default
// (worker.threads = auto) runs a partition thread per core of its set from 4 cores, and every partition on one
// event loop below that, so on 1 or 2 cores what a second core gives it is its store's and V8's threads
// (KEEL_WORKER__THREADS=2 forces two partition threads; README, "Partitions on threads"). Restate's Tokio runtime spreads partitions over every core. On this 2-core machine the SDK service and the
// load generator share the cores with the server (there are no others). On a larger one, BENCH_SCALING_CORES
// names the server's CPU sets and the rest of the run is pinned elsewhere: `BENCH_SCALING_CORES='0;0-1;0-3;0-7'
// BENCH_SERVICE_WORKERS=6 BENCH_SERVICE_MAX_STREAMS=4 taskset -c 8-15 npm run bench -- --scaling-only` (the
// server's own taskset replaces the mask it inherits; several service processes, or the service limits the run).
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { stopGroup } from './children.mjs';
import { log, median } from './common.mjs';
import { SCENARIOS, closedLoopCell, warmup } from './scenarios.mjs';
import { keelThreads, newServer, probe, register, spawnServer, waitHealthy } from './targets.mjs';

const CONCURRENCY = 32;
export const SCALING_SCENARIOS = ['noop', 'steps'];

/** The CPU sets to pin the server to, smallest first (BENCH_SCALING_CORES: `;`-separated taskset lists). */
export function scalingCpuSets() {
  const sets = (process.env.BENCH_SCALING_CORES ?? '0;0-1').split(';').map((s) => s.trim()).filter(Boolean);
  if (sets.length < 2) throw new Error(`BENCH_SCALING_CORES needs at least two CPU sets, got '${process.env.BENCH_SCALING_CORES}'`);
  return sets;
}

/** Cores in a taskset list (`0-3,6` → 5). */
export function coresIn(list) {
  return list.split(',').reduce((n, part) => {
    const [a, b] = part.split('-').map(Number);
    if (!Number.isInteger(a) || (b !== undefined && !(Number.isInteger(b) && b >= a))) throw new Error(`not a CPU list: '${list}'`);
    return n + (b === undefined ? 1 : b - a + 1);
  }, 0);
}

const hasTaskset = () => {
  try {
    execFileSync('taskset', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

/** One server pinned to `cpus`: its cells, round by round. */
async function pinnedCells(target, node, service, cpus, opts) {
  const s = await newServer(target, { logName: `${target}-scaling-${cpus.replaceAll(',', '_')}` });
  s.cpuList = cpus;
  try {
    spawnServer(s);
    await waitHealthy(s, { timeoutMs: opts.startTimeoutMs });
    await register(s, service.url, { timeoutMs: opts.startTimeoutMs });
    const rows = Object.fromEntries(SCALING_SCENARIOS.map((sc) => [sc, []]));
    for (const sc of SCALING_SCENARIOS) {
      await probe(s, SCENARIOS[sc], { timeoutMs: opts.startTimeoutMs, requestTimeoutMs: opts.requestTimeoutMs });
      if (opts.warmupMs > 0) await warmup(node, s, SCENARIOS[sc], opts);
    }
    for (let round = 1; round <= Math.max(1, opts.rounds); round++) {
      for (const sc of SCALING_SCENARIOS) rows[sc].push(await closedLoopCell(node, s, service, SCENARIOS[sc], CONCURRENCY, opts));
    }
    return Object.fromEntries(
      Object.entries(rows).map(([sc, rs]) => {
        const ok = rs.filter((r) => !r.failed && r.ok > 0);
        if (ok.length === 0) return [sc, { error: rs[0]?.failed ?? 'no successful call' }];
        return [sc, { rps: median(ok.map((r) => r.rps)), p99: median(ok.map((r) => r.latencyMs.p99)), cpuMsPerInvocation: median(ok.map((r) => r.cpuMsPerInvocation?.server)), ...busyCores(ok), roundsRps: ok.map((r) => r.rps), errors: rs.reduce((n, r) => n + (r.errors ?? 0), 0) }];
      }),
    );
  } finally {
    await stopGroup(s.child);
    if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
  }
}

/**
 * How many cores the cell kept busy (medians over its rounds): the server's, and the whole
 * machine's (server, SDK service and load generator), of every core the machine has (not this
 * process's mask: on a larger machine the run is pinned apart from the server). Where the
 * machine's is near every core, more cores for the server cannot show.
 */
export function busyCores(rounds, machineCores = cpus().length) {
  const cores = (r, ...who) => who.reduce((n, k) => n + (r.cpuMs?.[k] ?? NaN), 0) / r.elapsedMs;
  const server = median(rounds.map((r) => cores(r, 'server')).filter(Number.isFinite));
  const machine = median(rounds.map((r) => cores(r, 'server', 'service', 'loadgen')).filter(Number.isFinite));
  return { busyCores: { server: server ?? null, machine: machine ?? null, of: machineCores } };
}

/**
 * The scaling cells of one target: `{ target, workers, cpuSets: [{ cpus, cores, noop, steps }], ratio: { noop, steps } }`
 * (ratio: the largest CPU set's throughput ÷ the smallest's).
 */
export async function scalingRun(target, node, service, opts) {
  const out = { target, ...(target === 'keel' ? { workers: keelThreads() } : {}), cpuSets: [] };
  if (!hasTaskset()) return { ...out, error: 'taskset (util-linux) is not installed' };
  try {
    for (const cpus of scalingCpuSets()) {
      const cells = await pinnedCells(target, node, service, cpus, opts);
      out.cpuSets.push({ cpus, cores: coresIn(cpus), ...cells });
      log(`${target} scaling, server on cores ${cpus}: ${SCALING_SCENARIOS.map((sc) => `${sc} ${cells[sc].rps?.toFixed(0) ?? cells[sc].error}/s`).join(', ')}`);
    }
    const [first, last] = [out.cpuSets[0], out.cpuSets.at(-1)];
    out.ratio = Object.fromEntries(SCALING_SCENARIOS.map((sc) => [sc, first[sc].rps && last[sc].rps ? last[sc].rps / first[sc].rps : null]));
  } catch (e) {
    out.error = e.message;
    log(`${target} scaling: ERROR ${e.message}`);
  }
  return out;
}
