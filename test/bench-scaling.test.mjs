// The benchmark's scaling cell (bench/scaling.mjs, issue 23): the CPU sets a server is pinned to,
// and how the report and the goal read a run (2-core ÷ 1-core throughput, Restate's beside Keel's).
import t from 'tap';
import { parseArgs } from '../bench/options.mjs';
import { checkGoals, scalingTables } from '../bench/report.mjs';
import { busyCores, coresIn, scalingCpuSets } from '../bench/scaling.mjs';

t.test('CPU sets: taskset lists, at least two, counted in cores', async (t) => {
  t.equal(coresIn('0'), 1);
  t.equal(coresIn('0-1'), 2);
  t.equal(coresIn('0-3,6'), 5);
  t.throws(() => coresIn('3-1'), /not a CPU list/);
  t.same(scalingCpuSets(), ['0', '0-1'], 'by default core 0, then cores 0-1');
  process.env.BENCH_SCALING_CORES = '0';
  t.throws(() => scalingCpuSets(), /at least two/);
  process.env.BENCH_SCALING_CORES = '0;0-1;0-3';
  t.same(scalingCpuSets(), ['0', '0-1', '0-3']);
  delete process.env.BENCH_SCALING_CORES;
});

t.test('--scaling-only runs the scaling cell alone; --skip-scaling leaves it out', async (t) => {
  const only = parseArgs(['--scaling-only', '--targets', 'restate,keel']);
  t.equal(only.scaling, true);
  t.same([only.retained, only.retainedScale, only.sqlInvocations, only.scenarios, only.startupRuns], [[], 0, 0, [], 0]);
  t.equal(parseArgs(['--skip-scaling']).scaling, false);
  t.equal(parseArgs(['--retained-only']).scaling, false);
});

const cell = (rps) => ({ rps, p99: 20, cpuMsPerInvocation: 0.5, roundsRps: [rps] });
const run = (target, one, two) => ({
  target,
  ...(target === 'keel' ? { workers: 1 } : {}),
  cpuSets: [{ cpus: '0', cores: 1, noop: cell(one), steps: cell(one / 2) }, { cpus: '0-1', cores: 2, noop: cell(two), steps: cell(two / 2) }],
  ratio: { noop: two / one, steps: two / one },
});

t.test('the table and the goal: 2-core ÷ 1-core ≥ 1.7, Restate beside', async (t) => {
  const res = { meta: { opts: parseArgs(['--scaling-only', '--targets', 'restate,keel']) }, results: [], objects: [], burst: {}, startup: {}, recovery: {}, logs: {}, scaling: [run('restate', 700, 1300), run('keel', 1500, 1800)] };
  const [table] = scalingTables(res);
  t.equal(table.rows.length, 4, 'a row per target and CPU set');
  t.match(table.rows[3], ['keel', 1, '0-1', 2, /1800\/s/, /900\/s/, '- / -', '1.20x / 1.20x']);
  const goals = checkGoals(res).filter((g) => g.goal.startsWith('scaling'));
  t.equal(goals.length, 2);
  t.match(goals[0], { goal: 'scaling noop: throughput on 2 cores ÷ 1 ≥ 1.7×', target: 'keel', value: '1.20x (restate 1.86x)', pass: false });
  res.scaling[1] = run('keel', 1000, 1800);
  t.equal(checkGoals(res).find((g) => g.goal.startsWith('scaling noop')).pass, true);
});

t.test('a set whose machine was busy on ≥ 90% of its cores is machine-bound; a server that left its cores idle was not what limited it', async (t) => {
  const busy = (machine, server) => ({ busyCores: { machine, server, of: 2 } });
  const keel = run('keel', 1200, 1400);
  Object.assign(keel.cpuSets[1].noop, busy(1.92, 0.81));
  Object.assign(keel.cpuSets[1].steps, busy(1.2, 0.6));
  const res = { meta: { opts: parseArgs(['--scaling-only', '--targets', 'keel']) }, results: [], objects: [], burst: {}, startup: {}, recovery: {}, logs: {}, scaling: [keel] };
  const [table] = scalingTables(res);
  t.equal(table.rows[1][6], '1.92 of 2 (0.81) / 1.20 of 2 (0.60)', 'busy cores: machine of cores (server), noop / steps');
  const [noop, steps] = checkGoals(res).filter((g) => g.goal.startsWith('scaling'));
  t.match(noop, { value: '1.17x; machine-bound on 2 cores: 1.92 of 2 (0.81) busy', pass: false });
  t.equal(steps.value, '1.17x', 'a set with cores to spare is not');
  Object.assign(keel.cpuSets[0].noop, busy(1.63, 0.81));
  const [limited] = checkGoals(res).filter((g) => g.goal.startsWith('scaling'));
  t.equal(limited.value, '1.17x; not server-bound on 1 core: the server used 0.81 (machine 1.63 of 2 busy)', 'a first set whose server left its core partly idle says so first');
});

t.test('busy cores: CPU ms over wall ms, medians of the rounds, of every core of the machine', async (t) => {
  const round = (server, service, loadgen) => ({ elapsedMs: 6000, cpuMs: { server, service, loadgen } });
  t.same(busyCores([round(4800, 4200, 1200), round(6000, 4800, 1200), round(5400, 4500, 1200)], 16), { busyCores: { server: 0.9, machine: 1.85, of: 16 } });
  t.same(busyCores([round(4800, null, 1200)], 2), { busyCores: { server: 0.8, machine: null, of: 2 } }, 'a process not measured makes the machine unknown');
});

t.test("issue 23's per-call goals: CPU ≤ 2× the relay's at c=32 and c=256, p99 ≤ 0.8× Restate's at every concurrency run", async (t) => {
  const load = (target, scenario, concurrency, cpu, p99) => ({ target, scenario, concurrency, ok: 1000, rps: 1000, latencyMs: { p50: 1, p99 }, cpuMsPerInvocation: { server: cpu } });
  const results = [];
  for (const scenario of ['noop', 'steps'])
    for (const c of [1, 32, 256]) results.push(load('relay', scenario, c, 0.06, 1), load('restate', scenario, c, 0.6, 10), load('keel', scenario, c, c === 256 ? 0.1 : 0.18, c === 1 ? 8.4 : 7));
  const res = { meta: { opts: parseArgs(['--targets', 'relay,restate,keel', '--concurrency', '1,32,256']) }, results, objects: [], burst: {}, startup: {}, recovery: {}, logs: {} };
  const goals = checkGoals(res).filter((g) => g.target === 'keel');
  const cpu = goals.filter((g) => g.goal.includes("the relay's"));
  t.equal(cpu.length, 4, 'noop and steps at c=32 and c=256');
  t.match(cpu.find((g) => g.goal === "noop c=32: server CPU per call ≤ 2× the relay's"), { value: '3.00x (0.180 vs 0.060 ms)', pass: false });
  t.match(cpu.find((g) => g.goal === "steps c=256: server CPU per call ≤ 2× the relay's"), { value: '1.67x (0.100 vs 0.060 ms)', pass: true });
  const tail = goals.filter((g) => g.goal.endsWith('(issue 23)'));
  t.equal(tail.length, 6, 'noop and steps at each concurrency run, c=1 included');
  t.match(tail.find((g) => g.goal === 'noop c=1: p99 ≤ 0.8× Restate (issue 23)'), { value: '0.84x', pass: false });
  t.match(tail.find((g) => g.goal === 'steps c=32: p99 ≤ 0.8× Restate (issue 23)'), { value: '0.70x', pass: true });
  res.results = results.filter((r) => r.target !== 'relay');
  t.equal(checkGoals(res).find((g) => g.goal === "noop c=32: server CPU per call ≤ 2× the relay's").pass, null, 'without the relay: not measured');
});
