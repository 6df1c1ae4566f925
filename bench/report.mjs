// The report: tables built once from the results, rendered as text (stdout) and markdown (latest.md),
// the Keel/Restate ratios per cell and the goals check of issue 7.
import { fmt, median } from './common.mjs';
import { serverTailText } from './tail.mjs';
import { threadText } from './threads.mjs';

// ---------------------------------------------------------------- goals (issue 7, Keel's default mode)

export const GOALS = {
  closedLoop: { scenarios: ['noop', 'steps'], concurrency: [32, 256], minThroughputRatio: 2, maxP99Ratio: 0.5 },
  burst: { calls: 2000, concurrency: 500, maxMs: 4500 },
  startupMaxMs: 300,
  recovery: { invocations: 500, healthyMaxMs: 300 },
  // issue 11: every restate-CLI command at most Restate's time with 20,000 retained; at 1,000,000 (Keel only)
  // `restate invocations ls` under 1 s and count(*) under 200 ms
  sql: { invocations: 20000, scale: 1000000, lsMaxMs: 1000, countMaxMs: 200 },
  // issue 19: with N objects of 8 KiB and N sleeping invocations retained, RSS after a restart within 100 MB of the
  // empty server's, restart → first answer ≤ 1 s at N = 1,000,000, throughput on the filled server within 10% of
  // the empty one's, and each figure at least as good as Restate's at the same N
  retained: { rssOverEmptyMaxMb: 100, firstAnswerMaxMs: 1000, firstAnswerAtN: 1000000, minThroughputOfEmpty: 0.9 },
  // issue 23: with the server on 2 cores, throughput at least 1.7× its 1-core figure (Restate's beside it); server
  // CPU per call at most 2× the relay's at c=32 and c=256; p99 at most 0.8× Restate's in every closed-loop cell
  scaling: { minRatio: 1.7 },
  relayCpu: { scenarios: ['noop', 'steps'], concurrency: [32, 256], maxRatio: 2 },
  tail: { scenarios: ['noop', 'steps'], maxP99Ratio: 0.8 },
};

// ---------------------------------------------------------------- helpers

const good = (r) => r && r.ok !== undefined && r.ok > 0;
/** A closed-loop cell's result: `target` running `scenario` at concurrency `c`. */
const closedCell = (res, target, scenario, c) => res.results.find((r) => r.target === target && r.scenario === scenario && r.concurrency === c);
const ratio = (a, b) => (a != null && b != null && b > 0 ? a / b : null);
const x = (v) => (v == null ? '-' : `${fmt(v, 2)}x`);
const ms = (v, d = 1) => fmt(v, d);
const errText = (r) => (r?.errors ? Object.entries(r.errorKinds ?? {}).map(([k, n]) => `${k}×${n}`).join(', ') : '');

/** Keel/Restate ratios of two load results (throughput > 1 and latency/CPU < 1 mean Keel is better). */
export function ratiosOf(k, base) {
  if (!good(k) || !good(base)) return { throughput: null, p50: null, p99: null, cpuPerInvocation: null };
  return {
    throughput: ratio(k.rps, base.rps),
    p50: ratio(k.latencyMs.p50, base.latencyMs.p50),
    p99: ratio(k.latencyMs.p99, base.latencyMs.p99),
    cpuPerInvocation: ratio(k.cpuMsPerInvocation?.server, base.cpuMsPerInvocation?.server),
  };
}

const loadCells = (r) =>
  r && r.ok !== undefined
    ? [fmt(r.rps, 1), ms(r.latencyMs.p50, 2), ms(r.latencyMs.p99, 2), fmt(r.cpuMsPerInvocation?.server, 3), fmt(r.cpuMsPerInvocation?.serverNetOfIdle, 3), fmt(r.cpuMsPerInvocation?.service, 3), r.ok, r.errors]
    : null;

function loadRow(prefix, target, r, base, width) {
  const cells = loadCells(r);
  if (!cells) return [...prefix, target, r?.error ? 'ERROR' : 'not run', ...Array(width - prefix.length - 3).fill('-')];
  const isBase = target === 'restate';
  const rr = isBase ? null : ratiosOf(r, base);
  return [...prefix, target, ...cells, isBase ? '' : x(rr.throughput), isBase ? '' : x(rr.p50), isBase ? '' : x(rr.p99), isBase ? '' : x(rr.cpuPerInvocation)];
}

const LOAD_COLS = ['req/s', 'p50 ms', 'p99 ms', 'srv CPU ms/inv', '(net of idle)', 'svc CPU ms/inv', 'ok', 'errors', 'thr vs R', 'p50 vs R', 'p99 vs R', 'CPU vs R'];

// ---------------------------------------------------------------- tables of a full run

export function buildTables(res) {
  const { opts } = res.meta;
  const targets = opts.targets;
  /** The relay (bench/relay.mjs) keeps nothing: it has load cells only. */
  const servers = targets.filter((t) => t !== 'relay');
  const tables = [];

  for (const scenario of targets.length ? opts.scenarios : []) {
    const rows = [];
    const notes = [];
    for (const c of opts.concurrency) {
      const base = closedCell(res, 'restate', scenario, c);
      for (const t of targets) {
        const r = closedCell(res, t, scenario, c);
        rows.push(loadRow([c], t, r, base, LOAD_COLS.length + 2));
        if (r?.error) notes.push(`${t} c=${c}: ${r.error}`);
        if (r?.errors) notes.push(`${t} c=${c}: ${errText(r)}; e.g. ${r.errorSamples?.[0] ?? ''}`);
        const tail = serverTailText(r?.serverTail);
        if (tail !== undefined) notes.push(`${t} c=${c}: ${tail}`);
        const threads = threadText(r?.serverThreads);
        if (threads !== undefined) notes.push(`${t} c=${c}: ${threads}`);
      }
    }
    tables.push({ title: `Closed loop: ${scenario} (${res.scenarioPaths?.[scenario] ?? ''})`, columns: ['c', 'target', ...LOAD_COLS], rows, notes });
  }

  if (targets.length && res.objects?.length) {
    const rows = [];
    const notes = [];
    for (const keys of opts.objectKeys) {
      for (const c of opts.objectConcurrency) {
        const base = res.objects.find((r) => r.target === 'restate' && r.keys === keys && r.concurrency === c);
        for (const t of servers) {
          const r = res.objects.find((q) => q.target === t && q.keys === keys && q.concurrency === c);
          const row = loadRow([keys, c], t, r, base, LOAD_COLS.length + 3);
          row.splice(row.length - 4, 0, r?.check ? (r.check.pass ? `ok ${r.check.matching}/${r.check.keys}` : `WRONG ${r.check.matching}/${r.check.keys}`) : '-');
          rows.push(row);
          if (r?.error) notes.push(`${t} ${keys} key(s) c=${c}: ${r.error}`);
          if (r?.check && !r.check.pass) notes.push(`${t} ${keys} key(s) c=${c}: counts differ from successful calls: ${JSON.stringify(r.check.mismatches)}`);
          if (r?.errors) notes.push(`${t} ${keys} key(s) c=${c}: ${errText(r)}; e.g. ${r.errorSamples?.[0] ?? ''}`);
        }
      }
    }
    const cols = ['keys', 'c', 'target', ...LOAD_COLS];
    cols.splice(cols.length - 4, 0, 'counts');
    notes.unshift('Counter/{key}/add (ctx.get + ctx.set); 1 key: every call waits in that key\'s inbox; counts: final value of every key = successful calls to it');
    tables.push({ title: 'Virtual objects', columns: cols, rows, notes });
  }

  if (res.burst && Object.keys(res.burst).length) {
    const base = res.burst.restate;
    const notes = [];
    const rows = targets.map((t) => {
      const r = res.burst[t];
      if (r?.error) notes.push(`${t}: ${r.error}`);
      if (!r || r.ok === undefined) return [t, r?.error ? 'ERROR' : 'not run', '-', '-', '-', '-', '-', ''];
      return [t, fmt(r.wallMs / 1000, 2), ms(r.latencyMs.p50, 0), ms(r.latencyMs.p99, 0), r.ok, r.errors, t === 'restate' ? '' : x(ratio(r.wallMs, base?.wallMs)), errText(r)];
    });
    tables.push({
      title: `Greeter burst: ${opts.burstCalls} × Greeter/greet at concurrency ${opts.burstConcurrency} (durable 1 s sleep)`,
      columns: ['target', 'wall s', 'p50 ms', 'p99 ms', 'ok', 'errors', 'wall vs R', 'error kinds'],
      rows,
      notes,
    });
  }

  if (res.kafka && Object.keys(res.kafka).length) {
    const base = res.kafka.restate;
    const notes = ['records/s = records ÷ (last handler call − first); "to first" (subscription created → first call) includes the mock\'s ~3 s group join; lost = records never seen; extra = calls beyond one per record'];
    const rows = servers.map((t) => {
      const r = res.kafka[t];
      if (r?.error) notes.push(`${t}: ${r.error}`);
      if (!r || r.recordsPerSec === undefined) return [t, r?.error ? 'ERROR' : 'not run', '-', '-', '-', '-', '-'];
      return [t, fmt(r.recordsPerSec, 0), ms(r.firstToLastMs, 0), ms(r.toFirstMs, 0), r.lost, r.extra, t === 'restate' ? '' : x(ratio(r.recordsPerSec, base?.recordsPerSec))];
    });
    const r0 = Object.values(res.kafka)[0];
    tables.push({
      title: `Kafka subscription: ${r0?.records} records (${r0?.partitions} partitions, 100-byte values) → Bench/kafkaNoop`,
      columns: ['target', 'records/s', 'first→last ms', 'to first ms', 'lost', 'extra', 'records/s vs R'],
      rows,
      notes,
    });
  }

  if (res.startup && Object.keys(res.startup).length) {
    const rows = servers.map((t) => {
      const r = res.startup[t];
      if (!r) return [t, '-', '-', '-', '-', 'not run'];
      return [t, r.runs.length, ms(r.medianMs, 0), ms(r.maxMs, 0), r.runs.map((v) => v.toFixed(0)).join(' '), r.errors.join('; ')];
    });
    tables.push({ title: 'Startup: spawn → healthy on an empty data dir', columns: ['target', 'runs', 'median ms', 'max ms', 'each ms', 'errors'], rows, notes: [] });
  }

  if (res.recovery && Object.keys(res.recovery).length) {
    const rows = servers.map((t) => {
      const r = res.recovery[t];
      if (!r) return [t, '-', '-', '-', '-', '-', '-', '-', 'not run'];
      return [
        t,
        r.send ? `${r.send.ok}/${r.invocations}` : '-',
        r.atKill?.suspended ?? 0,
        ms(r.restartToHealthyMs, 0),
        ms(r.restartToCompletedMs, 0),
        ms(r.completedAfterLastDueMs, 0),
        r.final?.retries ?? '-',
        r.lost ?? '-',
        r.pass ? 'ok' : `FAIL${r.error ? `: ${r.error}` : ''}`,
      ];
    });
    const r0 = Object.values(res.recovery)[0];
    tables.push({
      title: `Crash recovery: ${r0?.invocations} × Bench/sleepy (${(r0?.sleepMs ?? 0) / 1000} s durable sleep), SIGKILL of the process group, restart on the same data dir`,
      columns: ['target', 'sent', 'suspended at kill', 'restart→healthy ms', 'restart→all done ms', 'done after last due ms', 'retries', 'lost', 'result'],
      rows,
      notes: ['"done after last due": when the last invocation completed, minus when its sleep was due (≈ last send + sleep)'],
    });
  }

  if (res.logs && Object.keys(res.logs).length) {
    const rows = [];
    const notes = [];
    for (const t of targets) {
      const l = res.logs[t];
      if (!l) continue;
      for (const [phase, c] of Object.entries(l.phases)) {
        rows.push([t, phase, c.errors, c.warnings, c.rt0010, c.file?.replace(/^.*\/bench\//, 'bench/') ?? '']);
        for (const s of c.errorSamples) notes.push(`${t} ${phase} error: ${s}`);
        for (const s of c.warnSamples) notes.push(`${t} ${phase} warn: ${s}`);
      }
    }
    tables.push({
      title: 'Log health (an error or a retry under load is a bug, even when throughput looks good)',
      columns: ['target', 'log', 'errors', 'warnings', 'RT0010', 'file'],
      rows,
      notes,
    });
  }

  tables.push(...sqlTables(res));
  tables.push(...retainedTables(res));
  tables.push(...scalingTables(res));

  if (res.micro && !res.micro.error) tables.push(...microTables(res.micro));
  else if (res.micro?.error) tables.push({ title: 'Micro-benchmark', columns: ['error'], rows: [[res.micro.error]], notes: [] });

  if (res.goals?.length) tables.push(goalsTable(res.goals, targets.filter((t) => t !== 'restate')));
  return tables;
}

/** The SQL scenario: each restate-CLI command and the CLI's own queries, Restate and Keel side by side; Keel at scale. */
export function sqlTables(res) {
  const out = [];
  const k = res.sql?.keel;
  const r = res.sql?.restate;
  if (k || r) {
    const rows = [];
    const line = (kind, name, pick) => {
      const kv = pick(k)?.medianMs;
      const rv = pick(r)?.medianMs;
      rows.push([kind, name, ms(rv, 0), ms(kv, 0), x(ratio(kv, rv))]);
    };
    const names = (list) => [...new Set([...(r?.[list] ?? []), ...(k?.[list] ?? [])].map((c) => c.name))];
    for (const n of names('commands')) line('restate CLI', n, (t) => t?.commands?.find((c) => c.name === n));
    for (const n of names('queries')) line('POST /query', n, (t) => t?.queries?.find((c) => c.name === n));
    const notes = [
      `restate: ${r ? (r.error ?? `${r.retained} invocations retained, filled in ${fmt(r.fillS, 1)} s`) : 'not run'}; keel: ${k ? (k.error ?? `${k.retained} retained, filled in ${fmt(k.fillS, 1)} s`) : 'not run'}`,
      'restate CLI: the CLI binary\'s wall time, process start included (median); POST /query: the server\'s answer to the CLI\'s verbatim query',
    ];
    for (const t of [r, k]) for (const c of t?.commands ?? []) if (c.code !== 0) notes.push(`${t.target} ${c.name}: exit ${c.code} ${c.output ?? ''}`);
    out.push({ title: `SQL: the restate CLI's queries with ${k?.invocations ?? r?.invocations} invocations retained (ms, median)`, columns: ['via', 'query', 'restate', 'keel', 'vs R'], rows, notes });
  }
  const s = res.sqlScale;
  if (s) {
    const rows = [...(s.commands ?? []).map((c) => ['restate CLI', c.name, ms(c.medianMs, 0)]), ...(s.queries ?? []).map((c) => ['POST /query', c.name, ms(c.medianMs, 0)])];
    const notes = s.error
      ? [`error: ${s.error}`]
      : [
          `store built in-process in ${fmt(s.buildS, 0)} s (${fmt(s.storeMb, 0)} MB); Keel healthy ${fmt(s.readyMs / 1000, 1)} s after spawn; the first query (it starts the engine) answered in ${fmt(s.firstQueryS, 1)} s, its copy of ${s.engineCopied} statuses loaded in ${fmt(s.engineLoadMs / 1000, 1)} s (${fmt(s.copyReadyS, 1)} s after spawn)`,
          `RSS after the load: Keel ${fmt(s.rssAfterLoadMb?.keel, 0)} MB, engine ${fmt(s.rssAfterLoadMb?.engine, 0)} MB; after the queries: Keel ${fmt(s.rssAfterQueriesMb?.keel, 0)} MB, engine ${fmt(s.rssAfterQueriesMb?.engine, 0)} MB; engine directory ${fmt(s.engineDirMb, 0)} MB`,
        ];
    out.push({ title: `SQL at scale: Keel with ${s.invocations} invocations (ms, median)`, columns: ['via', 'query', 'keel'], rows, notes });
  }
  return out;
}

export function microTables(m) {
  return [
    {
      title: `Micro: fold alone, per command kind (${m.invocations} invocations per kind, median of 3 rounds, ${m.node})`,
      columns: ['command', 'n', 'fold CPU µs', 'fold wall µs', 'encode µs', 'takeWrites µs', 'store writes/cmd'],
      rows: m.fold.map((f) => [f.kind, f.n, fmt(f.foldCpuUs, 2), fmt(f.foldWallUs, 2), fmt(f.encodeUs, 2), fmt(f.takeWritesUs, 2), fmt(f.storeWritesPerCmd, 2)]),
      notes: ['CPU µs is process CPU (includes GC threads) over the block / commands; encode = the log record; takeWrites = collecting the batch\'s store writes'],
    },
    {
      title: `Micro: append + fold on a PartitionProcessor (temp store on disk, ${m.durationMs / 1000} s per row, Bench/steps lifecycles of 9 commands)`,
      columns: ['fsync', 'batch', 'cmds/s', 'invocations/s', 'CPU µs/cmd', 'store writes', 'cmds/write', 'write p50 ms', 'write p99 ms', 'write max ms'],
      rows: m.append.map((a) => [
        a.fsync ? 'on' : 'off',
        a.batch,
        fmt(a.commandsPerSec, 0),
        fmt(a.invocationsPerSec, 0),
        fmt(a.cpuUsPerCmd, 1),
        a.storeWrites,
        fmt(a.cmdsPerWrite, 1),
        fmt(a.writeMs.p50, 3),
        fmt(a.writeMs.p99, 3),
        fmt(a.writeMs.max, 3),
      ]),
      notes: ['batch = appends issued at once and awaited together; the store write is one group commit (classic-level chained batch)'],
    },
  ];
}

// ---------------------------------------------------------------- goals

/** One row per goal and Keel target: `{goal, target, value, pass}` (pass null = not measured). */
export function checkGoals(res) {
  const out = [];
  const keels = res.meta.opts.targets.filter((t) => t !== 'restate');
  const g = GOALS;
  const add = (goal, target, value, pass) => out.push({ goal, target, value, pass });
  for (const t of keels) {
    for (const scenario of g.closedLoop.scenarios)
      for (const c of g.closedLoop.concurrency) {
        const rr = ratiosOf(closedCell(res, t, scenario, c), closedCell(res, 'restate', scenario, c));
        add(`${scenario} c=${c}: throughput ≥ ${g.closedLoop.minThroughputRatio}× Restate`, t, x(rr.throughput), rr.throughput == null ? null : rr.throughput >= g.closedLoop.minThroughputRatio);
        add(`${scenario} c=${c}: p99 ≤ ${g.closedLoop.maxP99Ratio}× Restate`, t, x(rr.p99), rr.p99 == null ? null : rr.p99 <= g.closedLoop.maxP99Ratio);
      }
    const b = res.burst?.[t];
    const o = res.meta.opts;
    const bOk = b && b.ok !== undefined && o.burstCalls === g.burst.calls && o.burstConcurrency === g.burst.concurrency;
    add(
      `Greeter ${g.burst.calls}@${g.burst.concurrency} ≤ ${g.burst.maxMs / 1000} s, no errors`,
      t,
      b?.ok !== undefined ? `${fmt(b.wallMs / 1000, 2)} s, ${b.errors} errors${bOk ? '' : ` (ran ${o.burstCalls}@${o.burstConcurrency})`}` : '-',
      bOk ? b.wallMs <= g.burst.maxMs && b.errors === 0 : null,
    );
    if (t === 'relay') continue; // the floor: load goals only
    for (const keys of res.meta.opts.objectKeys)
      for (const c of res.meta.opts.objectConcurrency) {
        const find = (tt) => res.objects?.find((r) => r.target === tt && r.keys === keys && r.concurrency === c);
        const k = find(t);
        const rr = ratiosOf(k, find('restate'));
        const correct = k?.check?.pass;
        add(
          `objects ${keys} key${keys === 1 ? '' : 's'} c=${c}: throughput ahead of Restate, counts correct`,
          t,
          `${x(rr.throughput)}${k?.check ? (correct ? ', counts ok' : ', counts WRONG') : ''}`,
          rr.throughput == null ? null : rr.throughput > 1 && correct === true,
        );
      }
    const s = res.startup?.[t];
    add(`startup (median) ≤ ${g.startupMaxMs} ms`, t, s?.medianMs != null ? `${fmt(s.medianMs, 0)} ms (max ${fmt(s.maxMs, 0)})` : '-', s?.medianMs != null ? s.medianMs <= g.startupMaxMs : null);
    const r = res.recovery?.[t];
    const rOk = r?.restartToHealthyMs != null && r.invocations === g.recovery.invocations;
    add(
      `recovery (${g.recovery.invocations} sleeping): restart→healthy ≤ ${g.recovery.healthyMaxMs} ms, none lost`,
      t,
      r?.restartToHealthyMs != null ? `${fmt(r.restartToHealthyMs, 0)} ms, lost ${r.lost ?? '?'}${rOk ? '' : ` (ran ${r.invocations})`}` : '-',
      rOk ? r.restartToHealthyMs <= g.recovery.healthyMaxMs && r.pass === true : null,
    );
    const l = res.logs?.[t];
    const ran = l && res.targets?.[t]?.status !== 'failed';
    add('zero RT0010 in the whole run', t, l ? `${l.server.rt0010} RT0010, ${l.server.errors} errors` : '-', ran ? l.server.rt0010 === 0 : null);
    if (t === 'keel') sqlGoals(res, add);
    if (t === 'keel') retainedGoals(res, add);
    if (t === 'keel') scalingGoals(res, add);
    if (t === 'keel') perCallGoals(res, add);
  }
  return out;
}

/** Issue 23's per-call goals: CPU against the relay's (what relaying alone costs here) and p99 against Restate's, at every concurrency run. */
function perCallGoals(res, add) {
  const { relayCpu, tail } = GOALS;
  for (const scenario of relayCpu.scenarios)
    for (const c of relayCpu.concurrency) {
      const [k, relay] = [closedCell(res, 'keel', scenario, c), closedCell(res, 'relay', scenario, c)];
      const v = good(k) && good(relay) ? ratio(k.cpuMsPerInvocation?.server, relay.cpuMsPerInvocation?.server) : null;
      const shown = v == null ? '-' : `${x(v)} (${fmt(k.cpuMsPerInvocation.server, 3)} vs ${fmt(relay.cpuMsPerInvocation.server, 3)} ms)`;
      add(`${scenario} c=${c}: server CPU per call ≤ ${relayCpu.maxRatio}× the relay's`, 'keel', shown, v == null ? null : v <= relayCpu.maxRatio);
    }
  for (const scenario of tail.scenarios)
    for (const c of res.meta.opts.concurrency) {
      const rr = ratiosOf(closedCell(res, 'keel', scenario, c), closedCell(res, 'restate', scenario, c));
      add(`${scenario} c=${c}: p99 ≤ ${tail.maxP99Ratio}× Restate (issue 23)`, 'keel', x(rr.p99), rr.p99 == null ? null : rr.p99 <= tail.maxP99Ratio);
    }
}

/** Scaling: each target's throughput per CPU set of its server, and the largest set's ÷ the smallest's. */
export function scalingTables(res) {
  const runs = res.scaling ?? [];
  if (runs.length === 0) return [];
  const rows = [];
  for (const r of runs) {
    if (r.error) rows.push([r.target, '-', r.error, '', '', '', '', '']);
    for (const c of r.cpuSets ?? []) {
      const cell = (sc) => (c[sc]?.error ? c[sc].error : `${fmt(c[sc]?.rps, 0)}/s, p99 ${ms(c[sc]?.p99, 1)} ms, ${ms(c[sc]?.cpuMsPerInvocation, 3)} ms CPU`);
      rows.push([r.target, r.workers ?? '-', c.cpus, c.cores, cell('noop'), cell('steps'), `${busy(c.noop)} / ${busy(c.steps)}`, c === r.cpuSets.at(-1) && r.ratio ? `${x(r.ratio.noop)} / ${x(r.ratio.steps)}` : '']);
    }
  }
  const notes = [
    'noop and steps at c=32 with the server process pinned (taskset) to each CPU set, on a fresh server each; median of --rounds; "× first set": throughput on the largest set ÷ on the smallest (noop / steps). The SDK service and the load generator are not pinned (on 2 cores they share them with the server).',
    '"busy": cores the whole machine kept busy during the cell (server + SDK service + load generator) of the cores it has, the server\'s share in brackets (noop / steps). A set whose machine is busy on ≥ 90% of its cores is machine-bound: the service and the load generator took what the server did not, and a ratio to it measures the machine, not the server. A server that used < 90% of the cores it was pinned to was not what limited its set.',
  ];
  return [{ title: 'Scaling: throughput by the cores the server may use', columns: ['target', 'workers', 'cores', 'n', 'noop', 'steps', 'busy', '× first set'], rows, notes }];
}

/** The share of its cores a machine (or a server, of those it is pinned to) keeps busy where it is what limits a cell. */
const BOUND_SHARE = 0.9;
const isMachineBound = (cell) => cell?.busyCores?.machine != null && cell.busyCores.machine >= BOUND_SHARE * cell.busyCores.of;
/**
 * Said when the smallest set's server left its cores partly idle: the server was not what
 * limited that set (the service, the load generator, fsync waits in a closed loop), so the ratio
 * does not show what more cores buy the server.
 */
function limitedElsewhere(set, sc) {
  const b = set?.[sc]?.busyCores;
  if (b?.server == null || b.server >= BOUND_SHARE * set.cores) return undefined;
  return `; not server-bound on ${set.cores} core${set.cores === 1 ? '' : 's'}: the server used ${fmt(b.server, 2)} (machine ${fmt(b.machine, 2)} of ${b.of} busy)`;
}
const busy = (cell) => (cell?.busyCores?.machine == null ? '-' : `${fmt(cell.busyCores.machine, 2)} of ${cell.busyCores.of} (${fmt(cell.busyCores.server, 2)})`);

function scalingGoals(res, add) {
  const k = (res.scaling ?? []).find((r) => r.target === 'keel');
  if (k === undefined) return;
  const r = (res.scaling ?? []).find((x) => x.target === 'restate');
  const [first, last] = [k.cpuSets?.[0], k.cpuSets?.at(-1)];
  for (const sc of ['noop', 'steps']) {
    const v = k.ratio?.[sc];
    const label = first && last ? `${last.cores} cores ÷ ${first.cores}` : 'cores';
    const bound = limitedElsewhere(first, sc) ?? (isMachineBound(last?.[sc]) ? `; machine-bound on ${last.cores} cores: ${busy(last[sc])} busy` : '');
    add(`scaling ${sc}: throughput on ${label} ≥ ${GOALS.scaling.minRatio}×`, 'keel', v == null ? (k.error ?? '-') : `${x(v)}${r?.ratio?.[sc] != null ? ` (restate ${x(r.ratio[sc])})` : ''}${bound}`, v == null ? null : v >= GOALS.scaling.minRatio);
  }
}

function sqlGoals(res, add) {
  const g = GOALS.sql;
  const k = res.sql?.keel;
  const r = res.sql?.restate;
  const shape = k?.invocations === g.invocations ? '' : ` (ran ${k?.invocations ?? '-'})`;
  for (const c of k?.commands ?? []) {
    const base = r?.commands?.find((b) => b.name === c.name);
    const ok = c.code === 0 && base?.code === 0;
    add(`sql, ${g.invocations} retained: restate ${c.name} ≤ Restate's time`, 'keel', `${ms(c.medianMs, 0)} vs ${ms(base?.medianMs, 0)} ms${shape}`, ok && !shape ? c.medianMs <= base.medianMs : null);
  }
  const s = res.sqlScale;
  const at = (name) => s?.commands?.find((c) => c.name === name);
  const sshape = s?.invocations === g.scale ? '' : ` (ran ${s?.invocations ?? '-'})`;
  const ls = at('invocations ls');
  add(`sql, ${g.scale} invocations: restate invocations ls < ${g.lsMaxMs} ms`, 'keel', ls ? `${ms(ls.medianMs, 0)} ms${sshape}` : '-', ls && !sshape ? ls.code === 0 && ls.medianMs < g.lsMaxMs : null);
  const count = s?.queries?.find((q) => q.name === 'count(*) (JSON)');
  add(`sql, ${g.scale} invocations: count(*) < ${g.countMaxMs} ms`, 'keel', count ? `${ms(count.medianMs, 0)} ms (restate sql: ${ms(at('sql count(*)')?.medianMs, 0)} ms)${sshape}` : '-', count && !sshape ? count.status === 200 && count.medianMs < g.countMaxMs : null);
}

/** Retained state: per N, Restate and Keel side by side. */
export function retainedTables(res) {
  const runs = res.retained ?? [];
  if (runs.length === 0) return [];
  const rows = [];
  const notes = [];
  for (const r of runs) {
    if (r.error) {
      notes.push(`${r.target} N=${r.n}: ${r.error}`);
      continue;
    }
    const of = (cell) => (r.filled?.[cell]?.rps != null ? `${fmt(r.filled[cell].rps, 0)} (${fmt(filledRatio(r, cell).ratio, 2)}x)` : '-');
    rows.push([
      r.target,
      `${r.n}${r.scale ? ' (built in-process)' : ''}`,
      `${fmt(r.empty?.rssMb, 0)} / ${fmt(r.filled?.rssMb, 0)}`,
      `${r.scale ? '-' : fmt(r.fill?.rssMb, 0)} (${fmt(r.fill?.dataMb, 0)} on disk, ${fmt(r.fill?.wallMs / 1000, 0)} s)`,
      `${fmt(r.emptyRestart?.toFirstAnswerMs, 0)} / ${fmt(r.restart?.toFirstAnswerMs, 0)}`,
      `${fmt(r.emptyRestart?.rssMb, 0)} / ${fmt(r.restart?.rssMb, 0)}; anon ${fmt(r.emptyRestart?.anonMb, 0)} / ${fmt(r.restart?.anonMb, 0)}; settled ${fmt(r.restart?.settled?.rssMb, 0)}, anon ${fmt(r.restart?.settled?.anonMb, 0)} (${fmt(r.restart?.settleMs / 1000, 0)} s)`,
      of('noop'),
      of('object'),
      `${fmt(r.filled?.noop?.p99, 1)} / ${fmt(r.filled?.object?.p99, 1)}`,
      r.check?.pass ? 'ok' : `WRONG ${JSON.stringify(r.check)}`,
    ]);
    if (r.fill?.childrenRssMb || r.restart?.childrenRssMb) notes.push(`${r.target} N=${r.n}: its other processes (the query engine) ${fmt(r.fill?.childrenRssMb, 0)} MB after the fill, ${fmt(r.restart?.childrenRssMb, 0)} MB after the restart`);
  }
  notes.push(
    'N objects with 8 KiB of state each and N invocations sleeping for an hour, on one server: its cells and a SIGKILL and restart empty, then the fill, a SIGKILL and restart, the cells again ' +
      '(built in-process: the same commands folded into the stopped server\'s store, then a start on it). ' +
      'RSS of the server process in MB ("after load": after the c=32 cells, empty / filled; "after restart": 2 s after the first answer, empty / filled, and its anonymous part — what the process owns; the rest is pages of files it maps, which LevelDB does for its tables and the kernel takes back when it needs them); ' +
      '"first answer": spawn → a call reading a retained object answered, empty / filled; "settled": once the server uses under 10% of a core (what it does after a start is over), when the cells start; throughput at c=32 on the filled server (filled ÷ a second empty server of the same target, started after the fill: each round runs a cell on the two back to back, and the ratio is the median of the rounds\' ratios)',
  );
  return [{ title: 'Retained state', columns: ['target', 'N', 'RSS after load', 'RSS filled', 'restart → first answer ms', 'RSS after restart', 'noop/s filled', 'object/s filled', 'p99 noop / object ms', 'check'], rows, notes }];
}

/**
 * Filled ÷ empty throughput of a cell: the median of the per-round ratios (each round runs the
 * filled and the empty server back to back, retained.mjs), with their range; a run without them
 * (an older results file) divides the medians.
 */
export function filledRatio(run, cell) {
  const rounds = run.pairedRatios?.[cell];
  if (rounds?.length) return { ratio: median(rounds), spread: `[${rounds.map((v) => v.toFixed(2)).join(' ')}]` };
  return { ratio: run.filled[cell].rps / (run.emptyPaired ?? run.empty)[cell].rps, spread: '' };
}

function retainedGoals(res, add) {
  const g = GOALS.retained;
  for (const k of (res.retained ?? []).filter((r) => r.target === 'keel')) {
    const r = (res.retained ?? []).find((x) => x.target === 'restate' && x.n === k.n && !x.error);
    const ran = !k.error && k.check?.pass;
    // Anonymous memory (what the process owns; mapped file pages are the kernel's to take back), the
    // larger of 2 s after the first answer and once settled: neither a peak nor a trough is left out.
    const rss = (x) => Math.max(x.restart.anonMb ?? 0, x.restart.settled?.anonMb ?? 0);
    const over = ran ? rss(k) - k.emptyRestart.anonMb : null;
    const rOver = r ? rss(r) - r.emptyRestart.anonMb : null;
    add(
      `retained ${k.n}: memory after restart (RssAnon) ≤ the empty server's + ${g.rssOverEmptyMaxMb} MB, and ≤ Restate's`,
      'keel',
      ran ? `${fmt(rss(k), 0)} MB, +${fmt(over, 0)} MB${r ? ` (restate ${fmt(rss(r), 0)} MB, +${fmt(rOver, 0)} MB)` : ''}` : k.error ?? 'check failed',
      ran ? over <= g.rssOverEmptyMaxMb && (r ? rss(k) <= rss(r) : true) : null,
    );
    const first = k.restart?.toFirstAnswerMs;
    const bound = k.n >= g.firstAnswerAtN ? first <= g.firstAnswerMaxMs : true;
    add(`retained ${k.n}: restart → first answer${k.n >= g.firstAnswerAtN ? ` ≤ ${g.firstAnswerMaxMs} ms and` : ''} ≤ Restate's`, 'keel', ran ? `${fmt(first, 0)} ms${r ? ` vs ${fmt(r.restart.toFirstAnswerMs, 0)} ms` : ' (Restate not run)'}` : '-', ran ? bound && (r ? first <= r.restart.toFirstAnswerMs : true) : null);
    for (const cell of ['noop', 'object']) {
      const f = ran ? filledRatio(k, cell) : null;
      add(`retained ${k.n}: ${cell} throughput filled ≥ ${g.minThroughputOfEmpty}× empty`, 'keel', ran ? `${x(f.ratio)} ${f.spread}${r ? ` (restate ${x(filledRatio(r, cell).ratio)} ${filledRatio(r, cell).spread})` : ''}` : '-', ran ? f.ratio >= g.minThroughputOfEmpty : null);
    }
  }
}

function goalsTable(goals, keels) {
  const names = [...new Set(goals.map((g) => g.goal))];
  const cell = (g) => (g ? `${g.pass == null ? 'n/a' : g.pass ? 'PASS' : 'FAIL'} ${g.value}` : '');
  const rows = names.map((n) => [n, ...keels.map((t) => cell(goals.find((g) => g.goal === n && g.target === t)))]);
  const notes = keels.includes('relay') ? ['relay: the protocol relayed and nothing kept (bench/relay.mjs), on the same machine with the same service and load: a goal it misses is out of reach of a server that keeps anything, here'] : [];
  return { id: 'goals', title: 'Goals (issues 7, 11, 19 and 23; they must hold for `keel`, Keel\'s default mode)', columns: ['goal', ...keels], rows, notes };
}

// ---------------------------------------------------------------- renderers

export function renderText(tables) {
  const out = [];
  for (const t of tables) {
    const all = [t.columns, ...t.rows].map((r) => r.map((c) => String(c ?? '')));
    const widths = t.columns.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
    const line = (r) =>
      r
        .map((c, i) => (typeof t.rows[0]?.[i] === 'number' || /^[\d.x-]+$/.test(c) ? c.padStart(widths[i]) : c.padEnd(widths[i])))
        .join('  ')
        .trimEnd();
    out.push('', `== ${t.title}`, line(all[0]), widths.map((w) => '-'.repeat(w)).join('  '));
    for (const r of all.slice(1)) out.push(line(r));
    for (const n of t.notes ?? []) out.push(`   ${n}`);
  }
  return out.join('\n');
}

const mdCell = (c) => String(c ?? '').replace(/\|/g, '\\|');

export function renderMarkdown(tables, header = []) {
  const out = [...header];
  for (const t of tables) {
    out.push('', `### ${t.title}`, '', `| ${t.columns.map(mdCell).join(' | ')} |`, `|${t.columns.map(() => '---').join('|')}|`);
    for (const r of t.rows) out.push(`| ${r.map(mdCell).join(' | ')} |`);
    if (t.notes?.length) out.push('', ...t.notes.map((n) => `- ${n}`));
  }
  return out.join('\n') + '\n';
}
