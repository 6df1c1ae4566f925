// Keel vs Restate benchmark: `make bench` → `npm run bench` → `node bench/run.mjs [flags]`. See bench/README.md.
// Every flag has an env equivalent [in brackets]; lists are comma-separated, `none` is the empty list.
//
// Targets, one server at a time:
//   --only / --targets LIST   restate, keel (default: fsync on), keel-nofsync, relay    [BENCH_TARGETS] (all four)
// Closed-loop cells (req/s, p50, p99, CPU per invocation):
//   --scenarios LIST          noop, steps (greeter also works)                          [BENCH_SCENARIOS] (noop,steps)
//   --concurrency LIST        concurrencies                                             [BENCH_CONCURRENCY] (1,32,256)
//   --duration S              measured seconds per cell                                 [BENCH_DURATION] (6)
//   --run-warmup S            unmeasured seconds before each cell                       [BENCH_RUN_WARMUP] (1)
//   --warmup S                per-server warmup per scenario, at c=16                   [BENCH_WARMUP] (15)
//   --idle S                  idle-CPU baseline per server                              [BENCH_IDLE] (2)
//   --request-timeout S       per-request timeout                                       [BENCH_REQUEST_TIMEOUT] (10)
//   --rounds N                the load phase (closed-loop, object and burst cells) N times, the targets in turn
//                             (forward, then backward, ...), each time on fresh servers; a cell reports the
//                             median of each figure over the rounds                     [BENCH_ROUNDS] (3)
// Virtual objects (Counter/{key}/add, final counts checked), cells as above:
//   --objects LIST            key counts                                                [BENCH_OBJECTS] (1,100)
//   --object-concurrency LIST concurrencies                                             [BENCH_OBJECT_CONCURRENCY] (32,256)
// Greeter burst (fixed count, wall time):
//   --burst CALLS@C           Greeter/greet calls at concurrency C                      [BENCH_BURST] (2000@500)
//   --burst-timeout S         per-request timeout in the burst                          [BENCH_BURST_TIMEOUT] (30)
// Kafka subscription → no-op handler (records/s; on librdkafka's mock cluster, needs kcat):
//   --kafka N                 records per target (0: skip)                              [BENCH_KAFKA] (10000 when kcat is on PATH, else 0)
//   --kafka-timeout S         how long a target may take to deliver them                [BENCH_KAFKA_TIMEOUT] (120)
// Lifecycle:
//   --startup-runs N          spawn → healthy on an empty dir, N times (0: skip)        [BENCH_STARTUP_RUNS] (5)
//   --recovery N              sleeping invocations at the SIGKILL (0: skip)             [BENCH_RECOVERY] (500)
//   --recovery-sleep S        their durable sleep                                       [BENCH_RECOVERY_SLEEP] (5)
//   --skip-lifecycle          no startup, no recovery                                   [BENCH_SKIP_LIFECYCLE=1]
//   --skip-load               no closed-loop, object, burst or Kafka cells              [BENCH_SKIP_LOAD=1]
// Micro-benchmark (bench/micro.mjs, in-process fold and append):
//   --micro-only              only the micro-benchmark (no servers)                     [BENCH_MICRO_ONLY=1]
//   --skip-micro              no micro-benchmark                                        [BENCH_SKIP_MICRO=1]
//   --micro-invocations N     invocations per command kind in the fold part             [BENCH_MICRO_INVOCATIONS] (2000)
//   --micro-duration S        seconds per append row                                    [BENCH_MICRO_DURATION] (1.5)
//   --micro-batches LIST      append batch sizes                                        [BENCH_MICRO_BATCHES] (1,16,256)
// SQL (bench/sql.mjs): the restate CLI's queries timed, side by side, then Keel alone at scale:
//   --sql N                   retained invocations for the side-by-side cell (0: skip)  [BENCH_SQL] (20000)
//   --sql-runs N              timed runs of each command and query (median)             [BENCH_SQL_RUNS] (11)
//   --sql-scale N             Keel only: a store of N invocations built in-process (0: skip) [BENCH_SQL_SCALE] (1000000)
//   --sql-only                only the SQL scenario (targets restate and keel)          [BENCH_SQL_ONLY=1]
//   --skip-sql                no SQL scenario                                           [BENCH_SKIP_SQL=1]
// Retained state (bench/retained.mjs; restate and keel): N objects of 8 KiB and N sleeping invocations, a SIGKILL:
//   --retained LIST           N per run, one fresh server per target and N (none: skip) [BENCH_RETAINED] (10000,100000)
//   --retained-scale N        Keel only: N objects and N sleepers built in-process (0: skip) [BENCH_RETAINED_SCALE] (1000000)
//   --retained-duration S     measured seconds of each noop/object cell, empty and filled [BENCH_RETAINED_DURATION] (5)
//   --retained-only           only the retained-state scenario                          [BENCH_RETAINED_ONLY=1]
// Scaling (bench/scaling.mjs; restate and keel): noop and steps at c=32 with the server pinned (taskset) to
// core 0, then cores 0-1 (BENCH_SCALING_CORES: other CPU sets, `;`-separated), --rounds times each:
//   --skip-scaling            no scaling cell                                           [BENCH_SKIP_SCALING=1]
//   --scaling-only            only the scaling cell                                     [BENCH_SCALING_ONLY=1]
// Other:
//   --start-timeout S         server start/health/registration timeout                  [BENCH_START_TIMEOUT] (30)
//   --out FILE                JSON results; the markdown summary goes beside it (.md)   [BENCH_OUT] (bench/results/latest.json)
//   --keep-dirs               keep the servers' temp data dirs
//   -h / --help
// Env only: BENCH_KEEL_MAIN (Keel entry point, default dist/main.js), BENCH_KEEL_DIST (dist/ for the micro-benchmark),
// BENCH_NODE (node for the service, load generator and micro-benchmark), BENCH_TMPDIR (where data dirs go).
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RESULTS_DIR } from './common.mjs';
import { SCENARIOS } from './scenarios.mjs';
import { ALL_TARGETS } from './targets.mjs';
import { kafkaAvailable } from './kafka.mjs';

const VALUED = {
  '--only': 'targets',
  '--targets': 'targets',
  '--scenarios': 'scenarios',
  '--concurrency': 'concurrency',
  '--duration': 'duration',
  '--run-warmup': 'runWarmup',
  '--warmup': 'warmup',
  '--idle': 'idle',
  '--request-timeout': 'requestTimeout',
  '--rounds': 'rounds',
  '--objects': 'objects',
  '--object-concurrency': 'objectConcurrency',
  '--burst': 'burst',
  '--burst-timeout': 'burstTimeout',
  '--startup-runs': 'startupRuns',
  '--recovery': 'recovery',
  '--recovery-sleep': 'recoverySleep',
  '--micro-invocations': 'microInvocations',
  '--micro-duration': 'microDuration',
  '--micro-batches': 'microBatches',
  '--start-timeout': 'startTimeout',
  '--sql': 'sql',
  '--sql-runs': 'sqlRuns',
  '--sql-scale': 'sqlScale',
  '--kafka': 'kafka',
  '--kafka-timeout': 'kafkaTimeout',
  '--retained': 'retained',
  '--retained-duration': 'retainedDuration',
  '--retained-scale': 'retainedScale',
  '--out': 'out',
};
const FLAGS = {
  '--skip-lifecycle': 'skipLifecycle',
  '--skip-load': 'skipLoad',
  '--micro-only': 'microOnly',
  '--skip-micro': 'skipMicro',
  '--keep-dirs': 'keepDirs',
  '--sql-only': 'sqlOnly',
  '--skip-sql': 'skipSql',
  '--retained-only': 'retainedOnly',
  '--skip-scaling': 'skipScaling',
  '--scaling-only': 'scalingOnly',
};

function die(msg) {
  console.error(`bench: ${msg}`);
  process.exit(2);
}

const truthy = (v) => v !== undefined && v !== '' && v !== '0' && v !== 'false';

export function help() {
  const src = readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n');
  return src.slice(0, src.findIndex((l) => !l.startsWith('//'))).map((l) => l.slice(3)).join('\n');
}

export function parseArgs(argv, env = process.env) {
  const o = {
    targets: env.BENCH_TARGETS ?? ALL_TARGETS.join(','),
    scenarios: env.BENCH_SCENARIOS ?? 'noop,steps',
    concurrency: env.BENCH_CONCURRENCY ?? '1,32,256',
    duration: env.BENCH_DURATION ?? '6',
    runWarmup: env.BENCH_RUN_WARMUP ?? '1',
    warmup: env.BENCH_WARMUP ?? '15',
    idle: env.BENCH_IDLE ?? '2',
    requestTimeout: env.BENCH_REQUEST_TIMEOUT ?? '10',
    rounds: env.BENCH_ROUNDS ?? '3',
    objects: env.BENCH_OBJECTS ?? '1,100',
    objectConcurrency: env.BENCH_OBJECT_CONCURRENCY ?? '32,256',
    burst: env.BENCH_BURST ?? '2000@500',
    burstTimeout: env.BENCH_BURST_TIMEOUT ?? '30',
    startupRuns: env.BENCH_STARTUP_RUNS ?? '5',
    recovery: env.BENCH_RECOVERY ?? '500',
    recoverySleep: env.BENCH_RECOVERY_SLEEP ?? '5',
    microInvocations: env.BENCH_MICRO_INVOCATIONS ?? '2000',
    microDuration: env.BENCH_MICRO_DURATION ?? '1.5',
    microBatches: env.BENCH_MICRO_BATCHES ?? '1,16,256',
    startTimeout: env.BENCH_START_TIMEOUT ?? '30',
    sql: env.BENCH_SQL ?? '20000',
    sqlRuns: env.BENCH_SQL_RUNS ?? '11',
    sqlScale: env.BENCH_SQL_SCALE ?? '1000000',
    sqlOnly: truthy(env.BENCH_SQL_ONLY),
    skipSql: truthy(env.BENCH_SKIP_SQL),
    retained: env.BENCH_RETAINED ?? '10000,100000',
    retainedDuration: env.BENCH_RETAINED_DURATION ?? '5',
    retainedScale: env.BENCH_RETAINED_SCALE ?? '1000000',
    retainedOnly: truthy(env.BENCH_RETAINED_ONLY),
    skipScaling: truthy(env.BENCH_SKIP_SCALING),
    scalingOnly: truthy(env.BENCH_SCALING_ONLY),
    kafka: env.BENCH_KAFKA ?? (kafkaAvailable() ? '10000' : '0'),
    kafkaTimeout: env.BENCH_KAFKA_TIMEOUT ?? '120',
    out: env.BENCH_OUT ?? join(RESULTS_DIR, 'latest.json'),
    skipLifecycle: truthy(env.BENCH_SKIP_LIFECYCLE),
    skipLoad: truthy(env.BENCH_SKIP_LOAD),
    microOnly: truthy(env.BENCH_MICRO_ONLY),
    skipMicro: truthy(env.BENCH_SKIP_MICRO),
    keepDirs: false,
  };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    let v;
    if (a.includes('=')) [a, v] = [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)];
    if (a === '-h' || a === '--help') {
      console.log(help());
      process.exit(0);
    } else if (FLAGS[a]) o[FLAGS[a]] = true;
    else if (VALUED[a]) {
      if (v === undefined) v = argv[++i];
      if (v === undefined) die(`${a} needs a value`);
      o[VALUED[a]] = v;
    } else die(`unknown argument ${a} (try --help)`);
  }
  const list = (s) => (String(s).trim() === 'none' ? [] : String(s).split(',').map((x) => x.trim()).filter(Boolean));
  const num = (s, what) => {
    const n = Number(s);
    if (!Number.isFinite(n) || n < 0) die(`${what}: not a number: ${s}`);
    return n;
  };
  const ints = (s, what) => {
    const l = list(s).map((c) => num(c, what));
    if (l.some((c) => c < 1 || !Number.isInteger(c))) die(`${what} must be positive integers`);
    return l;
  };
  let burstCalls = 0;
  let burstConcurrency = 0;
  if (String(o.burst).trim() !== 'none' && String(o.burst).trim() !== '0') {
    const m = /^(\d+)@(\d+)$/.exec(String(o.burst).trim());
    if (!m) die(`--burst: want CALLS@CONCURRENCY, e.g. 2000@500, or none: ${o.burst}`);
    [burstCalls, burstConcurrency] = [Number(m[1]), Number(m[2])];
  }
  const opts = {
    targets: list(o.targets),
    scenarios: list(o.scenarios),
    concurrency: ints(o.concurrency, 'concurrency'),
    durationMs: num(o.duration, 'duration') * 1000,
    runWarmupMs: num(o.runWarmup, 'run-warmup') * 1000,
    warmupMs: num(o.warmup, 'warmup') * 1000,
    idleMs: num(o.idle, 'idle') * 1000,
    requestTimeoutMs: num(o.requestTimeout, 'request-timeout') * 1000,
    rounds: ints(o.rounds, 'rounds')[0] ?? 1,
    objectKeys: ints(o.objects, 'objects'),
    objectConcurrency: ints(o.objectConcurrency, 'object-concurrency'),
    burstCalls,
    burstConcurrency,
    burstRequestTimeoutMs: num(o.burstTimeout, 'burst-timeout') * 1000,
    startupRuns: num(o.startupRuns, 'startup-runs'),
    recoveryCount: num(o.recovery, 'recovery'),
    recoverySleepMs: num(o.recoverySleep, 'recovery-sleep') * 1000,
    micro: !o.skipMicro,
    microInvocations: num(o.microInvocations, 'micro-invocations'),
    microDurationMs: num(o.microDuration, 'micro-duration') * 1000,
    microBatches: ints(o.microBatches, 'micro-batches'),
    startTimeoutMs: num(o.startTimeout, 'start-timeout') * 1000,
    sqlInvocations: num(o.sql, 'sql'),
    sqlRuns: Math.max(1, num(o.sqlRuns, 'sql-runs')),
    sqlScale: num(o.sqlScale, 'sql-scale'),
    kafkaRecords: String(o.kafka).trim() === 'none' ? 0 : num(o.kafka, 'kafka'),
    kafkaTimeoutMs: num(o.kafkaTimeout, 'kafka-timeout') * 1000,
    retained: ints(o.retained, 'retained'),
    retainedDurationMs: num(o.retainedDuration, 'retained-duration') * 1000,
    retainedScale: num(o.retainedScale, 'retained-scale'),
    out: resolve(o.out),
    keepDirs: o.keepDirs,
    scaling: !o.skipScaling,
  };
  if (o.skipLoad) {
    opts.scenarios = [];
    opts.objectKeys = [];
    opts.burstCalls = 0;
    opts.kafkaRecords = 0;
  }
  if (o.skipLifecycle) {
    opts.startupRuns = 0;
    opts.recoveryCount = 0;
  }
  if (o.microOnly) {
    opts.targets = [];
    opts.retained = [];
    opts.retainedScale = 0;
    opts.micro = true;
    opts.scaling = false;
  }
  if (o.skipSql) {
    opts.sqlInvocations = 0;
    opts.sqlScale = 0;
  }
  if (o.sqlOnly || o.retainedOnly || o.scalingOnly) {
    if (o.scalingOnly) {
      opts.sqlInvocations = 0;
      opts.sqlScale = 0;
      opts.kafkaRecords = 0;
      opts.retained = [];
      opts.retainedScale = 0;
    } else opts.scaling = false;
    if (o.retainedOnly) {
      opts.sqlInvocations = 0;
      opts.sqlScale = 0;
      opts.kafkaRecords = 0;
    } else {
      opts.retained = [];
      opts.retainedScale = 0;
    }
    opts.targets = opts.targets.filter((t) => t !== 'keel-nofsync');
    opts.scenarios = [];
    opts.objectKeys = [];
    opts.burstCalls = 0;
    opts.startupRuns = 0;
    opts.recoveryCount = 0;
    opts.micro = false;
  }
  if (opts.objectConcurrency.length === 0) opts.objectKeys = [];
  if (opts.targets.includes('keel-fsync')) die("target keel-fsync is now `keel` (Keel's default is fsync on); the other mode is keel-nofsync");
  for (const t of opts.targets) if (!ALL_TARGETS.includes(t)) die(`unknown target ${t} (known: ${ALL_TARGETS.join(', ')})`);
  for (const s of opts.scenarios) if (!SCENARIOS[s]) die(`unknown scenario ${s} (known: ${Object.keys(SCENARIOS).join(', ')})`);
  return opts;
}
