// The cost of flow control (`npm run bench:flow`; BENCH_FLOW=0 skips it in `make bench`): on Keel and on
// restate-server 1.7.12 (its flow control on: `experimental-enable-vqueues`), closed-loop noop calls at
// c=32 and c=256, unscoped (/restate/call/Bench/noop) against scoped under a rule that never binds
// (/restate/scope/bench/call/Bench/noop, x-restate-limit-key: t1, rule `bench` concurrency 1,000,000),
// alternating, BENCH_FLOW_ROUNDS (3) rounds of BENCH_DURATION s (6) each; the median of each cell.
// Goal (issue P13): the scoped cell within 5% of the unscoped one.
// Then fairness: under a rule of concurrency 8 on scope `fair`, a quiet tenant (2 callers of a 20 ms
// handler) alone, then beside a busy tenant with 10x its callers: the quiet tenant's p99 loaded
// against unloaded (goal: within 2x). Writes bench/results/flow.json.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stopGroup } from './children.mjs';
import { LOG_DIR, RESULTS_DIR, fmt, httpCall, log, median, pickNode } from './common.mjs';
import { closedLoopCell } from './scenarios.mjs';
import { newServer, probe, register, spawnServer, startService, waitHealthy } from './targets.mjs';

const duration = Number(process.env.BENCH_DURATION ?? 6);
const rounds = Number(process.env.BENCH_FLOW_ROUNDS ?? 3);
const targets = (process.env.BENCH_FLOW_TARGETS ?? 'keel,restate').split(',');
const opts = { runWarmupMs: 1000, durationMs: duration * 1000, requestTimeoutMs: 10_000 };
const node = pickNode();
mkdirSync(LOG_DIR, { recursive: true });
const body = '{"name":"bench"}';
const VARIANTS = {
  unscoped: { path: '/restate/call/Bench/noop', body, expect: '"ok":true' },
  scoped: { path: '/restate/scope/bench/call/Bench/noop?limit-key=t1', body, expect: '"ok":true' },
};
const result = { date: new Date().toISOString(), durationS: duration, rounds, cells: {}, fairness: {} };
const holdBody = '{"ms":20}';
const tenant = (name) => ({ path: `/restate/scope/fair/call/Bench/hold?limit-key=${name}`, body: holdBody, expect: '"ok":true' });

/** The quiet tenant's p99 alone, then beside a busy tenant with 10x its callers. */
async function fairness(target, s, service) {
  const alone = await closedLoopCell(node, s, service, tenant('quiet'), 2, opts);
  const [quiet, busy] = await Promise.all([closedLoopCell(node, s, service, tenant('quiet'), 2, opts), closedLoopCell(node, s, service, tenant('busy'), 20, opts)]);
  const cell = { aloneP99: alone.latencyMs?.p99, loadedP99: quiet.latencyMs?.p99, quietRps: quiet.rps, busyRps: busy.rps, ratio: quiet.latencyMs?.p99 / alone.latencyMs?.p99 };
  result.fairness[target] = cell;
  log(`${target} fairness: quiet p99 alone ${fmt(cell.aloneP99, 1)} ms, beside a 10x tenant ${fmt(cell.loadedP99, 1)} ms (x${fmt(cell.ratio, 2)}); quiet ${fmt(cell.quietRps, 0)}/s, busy ${fmt(cell.busyRps, 0)}/s`);
}

async function start(target, service) {
  const s = await newServer(target, { logName: `flow-${target}` });
  if (target === 'restate') {
    s.configFile = join(s.dataDir, 'restate.toml');
    writeFileSync(s.configFile, 'experimental-enable-vqueues = true\n');
  }
  spawnServer(s);
  await waitHealthy(s, { timeoutMs: 60_000 });
  await register(s, service.url, { timeoutMs: 30_000 });
  const rule = await httpCall('PUT', `${s.admin}/limits/rules`, { body: [{ pattern: 'bench', limits: { concurrency: 1_000_000 } }, { pattern: 'fair', limits: { concurrency: 8 } }], timeoutMs: 10_000 });
  if (rule.status !== 200) throw new Error(`${target}: PUT /limits/rules answered ${rule.status} ${rule.text}`);
  for (const v of [...Object.values(VARIANTS), tenant('probe')]) await probe(s, v, { timeoutMs: 30_000, requestTimeoutMs: 10_000 });
  return s;
}

const row = (r) => (r.failed ? `ERROR ${r.failed}` : `${fmt(r.rps, 1)} req/s p99 ${fmt(r.latencyMs.p99, 2)} ms cpu ${fmt(r.cpuMsPerInvocation?.server, 3)} ms/inv`);

const service = await startService(node, 'flow');
try {
  for (const target of targets) {
    const s = await start(target, service);
    try {
      for (const c of [32, 256]) {
        const runs = { unscoped: [], scoped: [] };
        for (let i = 0; i < rounds; i++) {
          // Alternating, the order flipped each round: drift on a shared VM falls on both alike.
          const order = i % 2 === 0 ? ['unscoped', 'scoped'] : ['scoped', 'unscoped'];
          for (const v of order) {
            const r = await closedLoopCell(node, s, service, VARIANTS[v], c, opts);
            runs[v].push(r);
            log(`${target} c=${c} ${v.padEnd(8)} round ${i + 1}: ${row(r)}`);
          }
        }
        const pick = (rs, f) => median(rs.filter((r) => !r.failed).map(f));
        const cell = Object.fromEntries(Object.entries(runs).map(([v, rs]) => [v, { rps: pick(rs, (r) => r.rps), p99: pick(rs, (r) => r.latencyMs.p99), cpuMsPerInvocation: pick(rs, (r) => r.cpuMsPerInvocation?.server ?? NaN) }]));
        cell.ratio = { rps: cell.scoped.rps / cell.unscoped.rps, p99: cell.scoped.p99 / cell.unscoped.p99 };
        result.cells[`${target} c=${c}`] = cell;
        log(`${target} c=${c}: scoped/unscoped throughput ${fmt(cell.ratio.rps, 3)}, p99 ${fmt(cell.ratio.p99, 3)}`);
      }
      await fairness(target, s, service);
    } finally {
      await stopGroup(s.child, 5000);
    }
  }
} finally {
  await stopGroup(service.child, 3000);
}
for (const [name, cell] of Object.entries(result.cells)) {
  console.log(`${name.padEnd(14)} unscoped ${fmt(cell.unscoped.rps, 0)}/s p99 ${fmt(cell.unscoped.p99, 1)} ms | scoped ${fmt(cell.scoped.rps, 0)}/s p99 ${fmt(cell.scoped.p99, 1)} ms | ratio ${fmt(cell.ratio.rps, 3)} (p99 ${fmt(cell.ratio.p99, 3)})`);
}
for (const [target, f] of Object.entries(result.fairness)) {
  console.log(`${target.padEnd(14)} fairness: quiet tenant p99 ${fmt(f.aloneP99, 1)} ms alone, ${fmt(f.loadedP99, 1)} ms beside a 10x tenant (x${fmt(f.ratio, 2)}, goal <= 2)`);
}
writeFileSync(join(RESULTS_DIR, 'flow.json'), JSON.stringify(result, null, 2));
log(`wrote ${join(RESULTS_DIR, 'flow.json')}`);
