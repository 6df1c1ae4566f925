// The load scenarios run against one started, registered server: closed-loop cells, virtual-object cells with
// a correctness check of the final state, and the fixed-count Greeter burst. Each load runs in its own
// load-generator process (bench/loadgen.mjs).
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { BENCH_DIR, httpCall } from './common.mjs';

/** Closed-loop scenarios (`--scenarios`). */
export const SCENARIOS = {
  noop: { path: '/Bench/noop', body: '{"name":"bench"}', expect: '"ok":true' },
  steps: { path: '/Bench/steps', body: '{"name":"bench"}', expect: '"steps":[1,2,3]' },
  greeter: { path: '/Greeter/greet', body: '{"name":"bench"}', expect: 'You said hi to bench!' },
};

/** The virtual-object handler: ctx.get, ctx.set, returns the new count. */
export const COUNTER = { path: '/Counter/{key}/add', body: '{"delta":1}', getPath: '/Counter/{key}/get' };

/** Every call a server must answer before it is measured (registration reached the ingress). */
export const PROBES = [
  ...Object.entries(SCENARIOS).map(([name, sc]) => ({ name, ...sc })),
  { name: 'counter', path: COUNTER.path.replace('{key}', 'probe'), body: COUNTER.body, expect: '' },
];

export function runLoad(node, spec, hardTimeoutMs) {
  return new Promise((res) => {
    const child = spawn(node, [join(BENCH_DIR, 'loadgen.mjs'), JSON.stringify(spec)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      err += `\nload generator killed after ${hardTimeoutMs} ms`;
    }, hardTimeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      try {
        res(JSON.parse(out.trim().split('\n').pop()));
      } catch {
        res({ failed: `load generator failed (exit ${code}): ${(err || out).trim().slice(-500)}` });
      }
    });
  });
}

const pidsOf = (server, service) => ({ server: server.pid, service: service.child.pid });
/** Keel's own account of its pauses and writes in a cell (bench/tail.mjs); the other targets have none to give. */
const metricsOf = (server) => (server.target?.startsWith('keel') ? { metricsUrl: `${server.admin}/metrics` } : {});

/** Unmeasured load at c=16 (per scenario, once per server). */
export async function warmup(node, server, sc, opts) {
  await runLoad(
    node,
    { url: server.ingress + sc.path, body: sc.body, expect: sc.expect, concurrency: 16, warmupMs: 0, durationMs: opts.warmupMs, requestTimeoutMs: opts.requestTimeoutMs },
    opts.warmupMs + opts.requestTimeoutMs + 15000,
  );
}

/** CPU per invocation minus what the server burns when idle (timers, flushes, update checks, ...). */
function netOfIdle(r, idleCpuMsPerSec) {
  if (idleCpuMsPerSec != null && r.cpuMs?.server != null && r.ok > 0)
    r.cpuMsPerInvocation.serverNetOfIdle = Math.max(0, r.cpuMs.server - (idleCpuMsPerSec * r.elapsedMs) / 1000) / r.ok;
}

/**
 * One closed-loop cell: a scenario at one concurrency for `durationMs` after `runWarmupMs`. `tail`: Keel's own
 * account of its pauses and writes in the window (bench/tail.mjs), and the server's CPU by thread (bench/threads.mjs,
 * every target) — only for a cell alone on its server (two
 * at once would each see the other's, and each scrape would land in the other's window).
 */
export async function closedLoopCell(node, server, service, sc, c, opts, idleCpuMsPerSec, { tail = false } = {}) {
  const r = await runLoad(
    node,
    {
      url: server.ingress + sc.path,
      body: sc.body,
      expect: sc.expect,
      concurrency: c,
      warmupMs: opts.runWarmupMs,
      durationMs: opts.durationMs,
      requestTimeoutMs: opts.requestTimeoutMs,
      pids: pidsOf(server, service),
      ...(tail ? { ...metricsOf(server), serverThreads: true } : {}),
    },
    opts.runWarmupMs + opts.durationMs + 2 * opts.requestTimeoutMs + 15000,
  );
  if (!r.failed) netOfIdle(r, idleCpuMsPerSec);
  return r;
}

/**
 * One object cell: Counter/add over `keys` keys (round robin) at concurrency c, then the check: every key's
 * final count (Counter/get) must equal the number of successful adds the load generator saw for it.
 */
export async function objectCell(node, server, service, keys, c, opts, idleCpuMsPerSec) {
  const keyPrefix = `k${keys}c${c}-`;
  const r = await runLoad(
    node,
    {
      url: server.ingress + COUNTER.path,
      body: COUNTER.body,
      concurrency: c,
      keys,
      keyPrefix,
      warmupMs: opts.runWarmupMs,
      durationMs: opts.durationMs,
      requestTimeoutMs: opts.requestTimeoutMs,
      pids: pidsOf(server, service),
    },
    opts.runWarmupMs + opts.durationMs + 2 * opts.requestTimeoutMs + 15000,
  );
  if (r.failed) return r;
  netOfIdle(r, idleCpuMsPerSec);
  const check = { keys, checked: 0, matching: 0, mismatches: [], okCalls: 0, counted: 0 };
  for (let i = 0; i < keys; i++) {
    const key = `${keyPrefix}${i}`;
    const want = r.perKey.ok[i];
    const g = await httpCall('POST', server.ingress + COUNTER.getPath.replace('{key}', encodeURIComponent(key)), { timeoutMs: opts.requestTimeoutMs });
    const got = g.status === 200 ? Number(g.text) : null;
    check.checked++;
    check.okCalls += want;
    if (got != null) check.counted += got;
    if (got === want) check.matching++;
    else if (check.mismatches.length < 5) check.mismatches.push({ key, ok: want, errors: r.perKey.errors[i], count: got ?? `HTTP ${g.status} ${g.text.slice(0, 100)}` });
  }
  check.pass = check.matching === keys;
  r.check = check;
  delete r.perKey;
  return r;
}

/** Exactly `calls` Greeter/greet at concurrency c: wall time from the first send to the last answer. */
export async function greeterBurst(node, server, service, opts) {
  const sc = SCENARIOS.greeter;
  return runLoad(
    node,
    {
      url: server.ingress + sc.path,
      body: sc.body,
      expect: sc.expect,
      concurrency: opts.burstConcurrency,
      total: opts.burstCalls,
      requestTimeoutMs: opts.burstRequestTimeoutMs,
      pids: pidsOf(server, service),
    },
    Math.ceil(opts.burstCalls / opts.burstConcurrency) * opts.burstRequestTimeoutMs + 60000,
  );
}
