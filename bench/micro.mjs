// Fold-and-append micro-benchmark: Keel's partition hot path in-process, no HTTP.
//   fold:   CPU (and wall) µs per command kind for the fold alone (PartitionState + fold), plus what encoding the
//           log record and collecting the store writes cost per command; commands built as the invoker builds them.
//   append: a PartitionProcessor on a temp store (real disk), append+fold throughput at batch sizes 1, 16, 256
//           (that many appends issued at once, awaited together) with fsync on and off, and the store write
//           latency per batch write (p50/p99).
// Run alone: `npm run bench -- --micro-only` or `npm exec -- node bench/micro.mjs [--invocations N]
// [--duration S] [--batches 1,16,256] [--json FILE]`; `make bench` runs it after the servers.
// Env: BENCH_MICRO_INVOCATIONS, BENCH_MICRO_DURATION, BENCH_MICRO_BATCHES, BENCH_KEEL_DIST (default dist/).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, median } from './common.mjs';
import { dataRoot } from './targets.mjs';

// ================================================================ adapter: all of Keel's API this file uses
// (one place to change when dist/ moves)
const DIST = resolve(process.env.BENCH_KEEL_DIST ?? join(ROOT, 'dist'));
const load = (p) => import(pathToFileURL(join(DIST, p)).href);
const [store, groupWriter, processor, partitionState, foldIndex, commands, messages, idsModule, logger] = await Promise.all([
  load('storage/store.js'),
  load('storage/group-writer.js'),
  load('partition/processor.js'),
  load('partition/state.js'),
  load('partition/fold/index.js'),
  load('log/commands.js'),
  load('protocol/messages.js'),
  load('common/ids.js'),
  load('common/logger.js'),
]);
/** The store in memory of each state made by K.newState. */
const stores = new WeakMap();
const K = {
  openStore: (dir) => store.openWorkerStore(dir),
  /** A processor whose effects do nothing: only append, fold and the store write are measured. */
  openProcessor: (db, partition, fsync) =>
    processor.PartitionProcessor.open(db, new groupWriter.GroupWriter(db), partition, { fsync, effects: { execute() {} }, logger: logger.silentLogger }),
  /**
   * A state over a store in memory that holds what `takeWrites` took: the fold reads back what left
   * memory (a suspended invocation's journal, its timer), as the server's does from LevelDB.
   */
  newState: (partition) => {
    const s = new partitionState.PartitionState(partition);
    const rows = new Map();
    s.loader = (key) => rows.get(key);
    stores.set(s, rows);
    return s;
  },
  fold: (state, actions, cmd) => foldIndex.fold({ state, actions, now_ms: cmd.timestamp_ms }, cmd),
  takeWrites: (state) => {
    const writes = state.takeWrites();
    const rows = stores.get(state);
    for (const [key, value] of writes) {
      if (value === null) rows.delete(key);
      else rows.set(key, value);
    }
    state.writesDurable();
    return writes;
  },
  encodeRecord: (cmd) => commands.encodeCommand(cmd),
  Outcome: commands.Outcome,
  TimerKind: commands.TimerKind,
  MT: messages.MessageType,
  entry: (name, fields) => Buffer.from(messages.encode(messages.pb[name], fields)),
  newId: () => idsModule.InvocationId.random(idsModule.randomPartitionKey()).bytes,
  idText: (bytes) => idsModule.InvocationId.fromBytes(bytes).text,
  statusOf: (state, bytes) => state.status(idsModule.InvocationId.fromBytes(bytes).text)?.status,
};
// ================================================================ commands, built as the invoker and ingress build them

const json = (v) => Buffer.from(JSON.stringify(v));
const C = {
  invoke: (id, extra = {}) => ({
    kind: 'invoke',
    invoke: { invocation_id: id, service: 'Bench', handler: 'steps', key: '', input: json({ name: 'bench' }), headers: [], service_type: 'Service', ...extra },
  }),
  invokeObject: (id, key) =>
    C.invoke(id, { service: 'Counter', handler: 'add', key, input: json({ delta: 1 }), service_type: 'VirtualObject', handler_type: 'Exclusive' }),
  append: (id, epoch, type, entry, extra = {}) => ({
    kind: 'journal_append',
    journal_append: { invocation_id: id, epoch, entry_type: type, entry, deployment_id: 'dp_bench', protocol_version: 6, ...extra },
  }),
  run: (id, epoch, cid) => C.append(id, epoch, K.MT.RunCommand, K.entry('Run', { result_completion_id: cid, name: `step-${cid}` })),
  runDone: (id, epoch, cid) =>
    C.append(id, epoch, K.MT.RunCompletion, K.entry('Notification', { completion_id: cid, value: { content: json(cid) } }), { requested_ack: true }),
  sleep: (id, epoch, cid, at) => C.append(id, epoch, K.MT.SleepCommand, K.entry('Sleep', { wake_up_time: at, result_completion_id: cid })),
  getState: (id, epoch) => C.append(id, epoch, K.MT.GetEagerStateCommand, K.entry('GetEagerState', { key: Buffer.from('count'), value: { content: json(1) } })),
  setState: (id, epoch) => C.append(id, epoch, K.MT.SetStateCommand, K.entry('SetState', { key: Buffer.from('count'), value: { content: json(2) } })),
  output: (id, epoch) => C.append(id, epoch, K.MT.OutputCommand, K.entry('Output', { value: { content: json({ ok: true }) } })),
  suspended: (id, epoch, cid) => ({ kind: 'attempt_ended', attempt_ended: { invocation_id: id, epoch, outcome: K.Outcome.SUSPENDED, waiting_completions: [cid] } }),
  end: (id, epoch) => ({ kind: 'attempt_ended', attempt_ended: { invocation_id: id, epoch, outcome: K.Outcome.END } }),
  timerFired: (id, cid, at) => ({ kind: 'timer_fired', timer_fired: { invocation_id: id, completion_id: cid, wake_up_ms: at, kind: K.TimerKind.SLEEP } }),
};

/** The commands of one `Bench/steps` invocation, in log order (9 commands). */
function stepsLifecycle(id) {
  const out = [C.invoke(id)];
  for (let cid = 1; cid <= 3; cid++) out.push(C.run(id, 0, cid), C.runDone(id, 0, cid));
  out.push(C.output(id, 0), C.end(id, 0));
  return out;
}

// ================================================================ fold alone

const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};
const wallUs = () => Number(process.hrtime.bigint()) / 1e3;

/** Accumulates CPU/wall time, record encoding and takeWrites per command kind. */
class KindTimer {
  constructor() {
    this.kinds = new Map();
  }
  /** Encodes, then folds, then takes the writes of `cmds` (all of one kind), timing each step. */
  run(kind, state, cmds, now) {
    let k = this.kinds.get(kind);
    if (!k) this.kinds.set(kind, (k = { n: 0, foldCpuUs: 0, foldWallUs: 0, encodeUs: 0, writesUs: 0, writes: 0 }));
    for (const c of cmds) c.timestamp_ms = now;
    let t = wallUs();
    for (const c of cmds) K.encodeRecord(c);
    k.encodeUs += wallUs() - t;
    const actions = [];
    const c0 = cpuUs();
    t = wallUs();
    for (const c of cmds) K.fold(state, actions, c);
    k.foldWallUs += wallUs() - t;
    k.foldCpuUs += cpuUs() - c0;
    t = wallUs();
    k.writes += K.takeWrites(state).length;
    k.writesUs += wallUs() - t;
    k.n += cmds.length;
    return actions;
  }
  result() {
    return [...this.kinds].map(([kind, k]) => ({
      kind,
      n: k.n,
      foldCpuUs: k.foldCpuUs / k.n,
      foldWallUs: k.foldWallUs / k.n,
      encodeUs: k.encodeUs / k.n,
      takeWritesUs: k.writesUs / k.n,
      storeWritesPerCmd: k.writes / k.n,
    }));
  }
}

/** One round: n service invocations through a sleep and a resume, and n object calls over 100 keys. */
function foldRound(n) {
  const timer = new KindTimer();
  const state = K.newState(0);
  let now = 1_700_000_000_000;
  const ids = Array.from({ length: n }, K.newId);
  const at = now + 60_000;
  const each = (f) => ids.map(f);
  timer.run('invoke', state, each((id) => C.invoke(id)), ++now);
  timer.run('journal_append Run', state, each((id) => C.run(id, 0, 1)), ++now);
  timer.run('journal_append RunCompletion', state, each((id) => C.runDone(id, 0, 1)), ++now);
  timer.run('journal_append Sleep', state, each((id) => C.sleep(id, 0, 2, at)), ++now);
  timer.run('attempt_ended SUSPENDED', state, each((id) => C.suspended(id, 0, 2)), ++now);
  timer.run('timer_fired (resumes)', state, each((id) => C.timerFired(id, 2, at)), ++now);
  timer.run('journal_append Output', state, each((id) => C.output(id, 1)), ++now);
  timer.run('attempt_ended END', state, each((id) => C.end(id, 1)), ++now);
  const notDone = ids.filter((id) => K.statusOf(state, id) !== 'completed').length;
  if (notDone > 0) throw new Error(`micro: ${notDone} of ${n} invocations did not complete (the fold API moved?)`);

  // Virtual object: 100 keys, n calls; the first per key runs, the others wait in the key's inbox. Each END
  // releases the lock and starts the next one from the inbox.
  const keys = 100;
  const objIds = Array.from({ length: n }, K.newId);
  const byText = new Map(objIds.map((b) => [K.idText(b), b]));
  const starts = (actions) => actions.filter((a) => a.kind === 'start').map((a) => ({ id: byText.get(a.id), epoch: a.epoch ?? 0 }));
  let running = starts(timer.run('invoke (object, 100 keys)', state, objIds.map((id, i) => C.invokeObject(id, `key-${i % keys}`)), ++now));
  let done = 0;
  while (running.length > 0) {
    timer.run('journal_append GetEagerState', state, running.map((r) => C.getState(r.id, r.epoch)), ++now);
    timer.run('journal_append SetState', state, running.map((r) => C.setState(r.id, r.epoch)), ++now);
    timer.run('journal_append Output (object)', state, running.map((r) => C.output(r.id, r.epoch)), ++now);
    done += running.length;
    running = starts(timer.run('attempt_ended END (object, next from inbox)', state, running.map((r) => C.end(r.id, r.epoch)), ++now));
  }
  if (done !== n) throw new Error(`micro: ${done} of ${n} object calls ran (the fold API moved?)`);
  return timer.result();
}

export function foldBench({ invocations = 2000, rounds = 3 } = {}) {
  foldRound(Math.min(invocations, 500)); // warm the JIT
  const runs = Array.from({ length: rounds }, () => foldRound(invocations));
  return runs[0].map((r, i) => ({
    ...r,
    n: r.n,
    foldCpuUs: median(runs.map((x) => x[i].foldCpuUs)),
    foldWallUs: median(runs.map((x) => x[i].foldWallUs)),
    encodeUs: median(runs.map((x) => x[i].encodeUs)),
    takeWritesUs: median(runs.map((x) => x[i].takeWritesUs)),
  }));
}

// ================================================================ append + fold on a real store

function pct(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** Times every chained-batch write of the store (the group writer's one write per group commit). */
function timeWrites(db) {
  const latencies = [];
  const batch = db.batch.bind(db);
  db.batch = (...args) => {
    const b = batch(...args);
    if (args.length === 0) {
      const write = b.write.bind(b);
      b.write = async (...w) => {
        const t = wallUs();
        try {
          return await write(...w);
        } finally {
          latencies.push((wallUs() - t) / 1000);
        }
      };
    }
    return b;
  };
  return latencies;
}

export async function appendBench({ batch, fsync, durationMs }) {
  const dir = mkdtempSync(join(dataRoot(), 'bench-micro-'));
  const db = await K.openStore(join(dir, 'worker'));
  const latencies = timeWrites(db);
  const p = await K.openProcessor(db, 0, fsync);
  try {
    let pending = [];
    const next = () => {
      if (pending.length === 0) pending = stepsLifecycle(K.newId());
      return pending.shift();
    };
    // As the server appends them: a client's invoke waits for disk, an attempt's messages do not
    // (their batch is synced when an action leaves the process; see AppendOptions).
    const append = (cmd) => p.append(cmd, cmd.kind === 'invoke' ? {} : { durable: false });
    // A short unmeasured start (the first writes open files).
    for (let i = 0; i < 3; i++) await Promise.all(Array.from({ length: batch }, () => append(next())));
    latencies.length = 0;
    let n = 0;
    const c0 = cpuUs();
    const t0 = wallUs();
    const stopAt = t0 + durationMs * 1000;
    while (wallUs() < stopAt) {
      await Promise.all(Array.from({ length: batch }, () => append(next())));
      n += batch;
    }
    const secs = (wallUs() - t0) / 1e6;
    const cpu = cpuUs() - c0;
    const sorted = latencies.slice().sort((a, b) => a - b);
    return {
      batch,
      fsync,
      commands: n,
      commandsPerSec: n / secs,
      invocationsPerSec: n / 9 / secs,
      cpuUsPerCmd: cpu / n,
      storeWrites: sorted.length,
      cmdsPerWrite: n / Math.max(1, sorted.length),
      writeMs: { p50: pct(sorted, 50), p99: pct(sorted, 99), max: sorted.at(-1) ?? null },
    };
  } finally {
    await p.close();
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runMicro({ invocations = 2000, durationMs = 1500, batches = [1, 16, 256] } = {}) {
  const started = Date.now();
  const fold = foldBench({ invocations });
  const append = [];
  for (const fsync of [false, true]) for (const batch of batches) append.push(await appendBench({ batch, fsync, durationMs }));
  return { node: process.version, dist: DIST, invocations, durationMs, fold, append, elapsedMs: Date.now() - started };
}

// ================================================================ main

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const env = process.env;
  const o = {
    invocations: Number(env.BENCH_MICRO_INVOCATIONS ?? 2000),
    durationMs: Number(env.BENCH_MICRO_DURATION ?? 1.5) * 1000,
    batches: (env.BENCH_MICRO_BATCHES ?? '1,16,256').split(',').map(Number),
    json: null,
  };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--invocations') o.invocations = Number(argv[++i]);
    else if (a === '--duration') o.durationMs = Number(argv[++i]) * 1000;
    else if (a === '--batches') o.batches = argv[++i].split(',').map(Number);
    else if (a === '--json') o.json = argv[++i];
    else {
      console.error(`micro: unknown argument ${a}`);
      process.exit(2);
    }
  }
  const result = await runMicro(o);
  if (o.json) writeFileSync(o.json, JSON.stringify(result, null, 2) + '\n');
  else {
    const { microTables, renderText } = await import('./report.mjs');
    console.log(renderText(microTables(result)));
  }
}
