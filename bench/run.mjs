// Keel vs Restate benchmark. `make bench` → `npm run bench` → `node bench/run.mjs [flags]`.
// See bench/README.md. Flags (env in brackets):
//   --only / --targets LIST   targets to run: keel, keel-fsync, restate             [BENCH_TARGETS]  (all three)
//   --scenarios LIST          noop, steps, greeter                                  [BENCH_SCENARIOS] (all)
//   --concurrency LIST        closed-loop concurrencies                             [BENCH_CONCURRENCY] (1,16,64)
//   --duration S              measured seconds per scenario × concurrency           [BENCH_DURATION] (6)
//   --run-warmup S            unmeasured seconds before each measurement            [BENCH_RUN_WARMUP] (1)
//   --warmup S                per-target warmup seconds per scenario (c=16)         [BENCH_WARMUP] (2)
//   --request-timeout S       per-request timeout                                   [BENCH_REQUEST_TIMEOUT] (10)
//   --start-timeout S         server start/health/registration timeout              [BENCH_START_TIMEOUT] (30)
//   --out FILE                JSON results                                          [BENCH_OUT] (bench/results/latest.json)
//   --idle S                  seconds of idle CPU measured per target (baseline)    [BENCH_IDLE] (2)
//   --keep-dirs               keep the servers' temp data dirs
//   -h / --help
// Other env: BENCH_KEEL_MAIN (Keel entry point, default dist/main.js), BENCH_NODE (node for service + load generator).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, closeSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import * as http from 'node:http';
import * as os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { groupPids, sampleCpu } from './proc.mjs';

const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(BENCH_DIR, '..');
const RESULTS_DIR = join(BENCH_DIR, 'results');
const LOG_DIR = join(RESULTS_DIR, 'logs');

// ---------------------------------------------------------------- options

const ALL_TARGETS = ['restate', 'keel', 'keel-fsync'];
const SCENARIOS = {
  noop: { path: '/Bench/noop', body: '{"name":"bench"}', expect: '"ok":true' },
  steps: { path: '/Bench/steps', body: '{"name":"bench"}', expect: '"steps":[1,2,3]' },
  greeter: { path: '/Greeter/greet', body: '{"name":"bench"}', expect: 'You said hi to bench!' },
};

function parseArgs(argv) {
  const env = process.env;
  const o = {
    targets: env.BENCH_TARGETS ?? ALL_TARGETS.join(','),
    scenarios: env.BENCH_SCENARIOS ?? Object.keys(SCENARIOS).join(','),
    concurrency: env.BENCH_CONCURRENCY ?? '1,16,64',
    duration: env.BENCH_DURATION ?? '6',
    runWarmup: env.BENCH_RUN_WARMUP ?? '1',
    warmup: env.BENCH_WARMUP ?? '2',
    requestTimeout: env.BENCH_REQUEST_TIMEOUT ?? '10',
    startTimeout: env.BENCH_START_TIMEOUT ?? '30',
    idle: env.BENCH_IDLE ?? '2',
    out: env.BENCH_OUT ?? join(RESULTS_DIR, 'latest.json'),
    keepDirs: false,
  };
  const names = {
    '--only': 'targets',
    '--targets': 'targets',
    '--scenarios': 'scenarios',
    '--concurrency': 'concurrency',
    '--duration': 'duration',
    '--run-warmup': 'runWarmup',
    '--warmup': 'warmup',
    '--request-timeout': 'requestTimeout',
    '--start-timeout': 'startTimeout',
    '--out': 'out',
    '--idle': 'idle',
  };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    let v;
    if (a.includes('=')) [a, v] = [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)];
    if (a === '-h' || a === '--help') {
      const src = readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n');
      console.log(src.slice(0, src.findIndex((l) => !l.startsWith('//'))).map((l) => l.slice(3)).join('\n'));
      process.exit(0);
    } else if (a === '--keep-dirs') o.keepDirs = true;
    else if (names[a]) {
      if (v === undefined) v = argv[++i];
      if (v === undefined) die(`${a} needs a value`);
      o[names[a]] = v;
    } else die(`unknown argument ${a} (try --help)`);
  }
  const list = (s) => String(s).split(',').map((x) => x.trim()).filter(Boolean);
  const num = (s, what) => {
    const n = Number(s);
    if (!Number.isFinite(n) || n < 0) die(`${what}: not a number: ${s}`);
    return n;
  };
  const opts = {
    targets: list(o.targets),
    scenarios: list(o.scenarios),
    concurrency: list(o.concurrency).map((c) => num(c, 'concurrency')),
    durationMs: num(o.duration, 'duration') * 1000,
    runWarmupMs: num(o.runWarmup, 'run-warmup') * 1000,
    warmupMs: num(o.warmup, 'warmup') * 1000,
    requestTimeoutMs: num(o.requestTimeout, 'request-timeout') * 1000,
    startTimeoutMs: num(o.startTimeout, 'start-timeout') * 1000,
    idleMs: num(o.idle, 'idle') * 1000,
    out: resolve(o.out),
    keepDirs: o.keepDirs,
  };
  for (const t of opts.targets) if (!ALL_TARGETS.includes(t)) die(`unknown target ${t} (known: ${ALL_TARGETS.join(', ')})`);
  for (const s of opts.scenarios) if (!SCENARIOS[s]) die(`unknown scenario ${s} (known: ${Object.keys(SCENARIOS).join(', ')})`);
  if (opts.concurrency.some((c) => c < 1 || !Number.isInteger(c))) die('concurrency must be positive integers');
  return opts;
}

function die(msg) {
  console.error(`bench: ${msg}`);
  process.exit(2);
}

const log = (msg) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The service and the load generator need Node >= 22 (the pinned Node 24 from node_modules when run via npm).
function pickNode() {
  if (process.env.BENCH_NODE) return process.env.BENCH_NODE;
  if (Number(process.versions.node.split('.')[0]) >= 22) return process.execPath;
  const pinned = join(ROOT, 'node_modules', 'node', 'bin', 'node');
  if (existsSync(pinned)) return pinned;
  return process.execPath;
}

// ---------------------------------------------------------------- processes

const children = new Set(); // process-group leaders we started

function spawnGroup(cmd, args, { env, logFile, cwd = ROOT, stdout = true }) {
  const fd = openSync(logFile, 'a');
  const child = spawn(cmd, args, {
    cwd,
    env,
    detached: true, // own process group: we can kill the whole tree
    stdio: ['ignore', stdout ? fd : 'ignore', fd],
  });
  closeSync(fd);
  child.exited = null;
  child.exitPromise = new Promise((res) => {
    child.on('exit', (code, signal) => {
      child.exited = { code, signal };
      res(child.exited);
    });
    child.on('error', (e) => {
      child.exited = { code: null, signal: null, error: e.message };
      res(child.exited);
    });
  });
  if (child.pid) children.add(child.pid);
  return child;
}

function killGroup(pgid, sig) {
  try {
    process.kill(-pgid, sig);
  } catch {
    /* gone */
  }
}

async function stopGroup(child, graceMs = 8000) {
  if (!child?.pid) return;
  const pgid = child.pid;
  killGroup(pgid, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline && groupPids(pgid).length > 0) await sleep(100);
  if (groupPids(pgid).length > 0) {
    log(`process group ${pgid} still alive after ${graceMs} ms, SIGKILL`);
    killGroup(pgid, 'SIGKILL');
    const d2 = Date.now() + 3000;
    while (Date.now() < d2 && groupPids(pgid).length > 0) await sleep(100);
  }
  children.delete(pgid);
}

function killAllNow() {
  for (const pgid of children) killGroup(pgid, 'SIGKILL');
  children.clear();
}
process.on('exit', killAllNow);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    log(`got ${sig}, killing servers`);
    killAllNow();
    process.exit(130);
  });
}

function freePort() {
  return new Promise((res, rej) => {
    const s = net.createServer();
    s.unref();
    s.on('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

function tail(file, lines = 15) {
  try {
    // eslint-disable-next-line no-control-regex
    const t = readFileSync(file, 'utf8').replace(/\x1b\[[0-9;]*m/g, '');
    return t.split('\n').filter((l) => l.trim()).slice(-lines).join('\n');
  } catch {
    return '';
  }
}

// ---------------------------------------------------------------- http helper (with timeout)

function httpCall(method, urlStr, { body, timeoutMs = 5000, headers = {} } = {}) {
  return new Promise((res) => {
    const u = new URL(urlStr);
    const buf = body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    let done = false;
    const finish = (r) => {
      if (!done) {
        done = true;
        clearTimeout(timer);
        res(r);
      }
    };
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname + u.search,
        method,
        agent: false,
        headers: buf ? { 'content-type': 'application/json', 'content-length': buf.length, ...headers } : headers,
      },
      (r) => {
        const chunks = [];
        r.on('data', (c) => chunks.push(c));
        r.on('end', () => finish({ status: r.statusCode, text: Buffer.concat(chunks).toString('utf8') }));
        r.on('error', (e) => finish({ status: 0, text: e.message }));
      },
    );
    const timer = setTimeout(() => {
      finish({ status: 0, text: `timeout after ${timeoutMs} ms` });
      req.destroy();
    }, timeoutMs);
    req.on('error', (e) => finish({ status: 0, text: e.code ?? e.message }));
    req.end(buf);
  });
}

/** Poll until fn() returns a truthy value; abort when `child` exits or the deadline passes. */
async function waitFor(what, fn, { deadline, child, intervalMs = 200 }) {
  let last;
  while (Date.now() < deadline) {
    if (child?.exited) throw new Error(`${what}: process exited (${fmtExit(child.exited)})`);
    const r = await fn();
    if (r?.ok) return r;
    last = r?.why ?? last;
    await sleep(intervalMs);
  }
  throw new Error(`${what}: timed out${last ? ` (last: ${last})` : ''}`);
}

const fmtExit = (e) => (e.error ? e.error : e.signal ? `signal ${e.signal}` : `code ${e.code}`);

// ---------------------------------------------------------------- targets

async function startService(node, tag) {
  const port = await freePort();
  const logFile = join(LOG_DIR, `service-${tag}.log`);
  writeFileSync(logFile, '');
  // stdout (the Greeter's console.log per call) is discarded; stderr goes to the log.
  const child = spawnGroup(node, [join(BENCH_DIR, 'service.mjs'), String(port)], {
    env: { ...process.env, RESTATE_LOGGING: process.env.RESTATE_LOGGING ?? 'WARN' },
    logFile,
    stdout: false,
  });
  await waitFor(
    'bench service',
    async () => (tail(logFile, 50).includes('bench service listening') ? { ok: true } : { why: tail(logFile, 2) }),
    { deadline: Date.now() + 15000, child, intervalMs: 100 },
  );
  return { child, port, url: `http://127.0.0.1:${port}`, logFile };
}

async function startServer(target, opts) {
  const [ingressPort, adminPort, nodePort] = [await freePort(), await freePort(), await freePort()];
  const dataDir = mkdtempSync(join(os.tmpdir(), `bench-${target}-`));
  const logFile = join(LOG_DIR, `${target}.log`);
  writeFileSync(logFile, '');
  const s = {
    target,
    ingress: `http://127.0.0.1:${ingressPort}`,
    admin: `http://127.0.0.1:${adminPort}`,
    dataDir,
    logFile,
  };
  if (target === 'restate') {
    const bin = join(ROOT, 'node_modules', '.bin', 'restate-server');
    if (!existsSync(bin)) throw Object.assign(new Error(`${bin} not found (npm ci?)`), { server: s });
    s.cmd = `${bin}`;
    s.child = spawnGroup(bin, [], {
      cwd: dataDir,
      logFile,
      env: {
        ...process.env,
        RESTATE_ADMIN__BIND_ADDRESS: `127.0.0.1:${adminPort}`,
        RESTATE_INGRESS__BIND_ADDRESS: `127.0.0.1:${ingressPort}`,
        RESTATE_BIND_ADDRESS: `127.0.0.1:${nodePort}`,
        RESTATE_ADVERTISED_ADDRESS: `http://127.0.0.1:${nodePort}`,
        RESTATE_BASE_DIR: dataDir,
      },
    });
  } else {
    const main = resolve(process.env.BENCH_KEEL_MAIN ?? join(ROOT, 'dist', 'main.js'));
    if (!existsSync(main)) throw Object.assign(new Error(`${main} not found (run \`make build\`)`), { server: s });
    s.cmd = `node ${main}`;
    // `node` from PATH: under npm scripts that is the pinned Node 24 (like `make run`).
    s.child = spawnGroup('node', [main], {
      cwd: dataDir,
      logFile,
      env: {
        ...process.env,
        KEEL_INGRESS__BIND_ADDRESS: `127.0.0.1:${ingressPort}`,
        KEEL_ADMIN__BIND_ADDRESS: `127.0.0.1:${adminPort}`,
        KEEL_BASE_DIR: dataDir,
        KEEL_WORKER__STORAGE_DB__FSYNC: target === 'keel-fsync' ? 'true' : 'false',
      },
    });
  }
  s.pid = s.child.pid;
  const deadline = Date.now() + opts.startTimeoutMs;
  try {
    await waitFor(
      `${target} admin health`,
      async () => {
        const r = await httpCall('GET', `${s.admin}/health`, { timeoutMs: 2000 });
        return r.status === 200 ? { ok: true } : { why: r.status ? `HTTP ${r.status}` : r.text };
      },
      { deadline, child: s.child },
    );
    if (target === 'restate') {
      await waitFor(
        'restate ingress health',
        async () => {
          const r = await httpCall('GET', `${s.ingress}/restate/health`, { timeoutMs: 2000 });
          return r.status === 200 ? { ok: true } : { why: r.status ? `HTTP ${r.status}` : r.text };
        },
        { deadline, child: s.child },
      );
    }
    const v = await httpCall('GET', `${s.admin}/version`, { timeoutMs: 2000 });
    try {
      s.version = JSON.parse(v.text).version;
    } catch {
      /* unknown */
    }
  } catch (e) {
    e.server = s;
    throw e;
  }
  return s;
}

async function register(s, serviceUrl, opts) {
  const deadline = Date.now() + opts.startTimeoutMs;
  const r = await waitFor(
    `${s.target} deployment registration`,
    async () => {
      const r = await httpCall('POST', `${s.admin}/deployments`, { body: { uri: serviceUrl }, timeoutMs: 10000 });
      if (r.status >= 200 && r.status < 300) return { ok: true, ...r };
      // 4xx will not get better by retrying
      if (r.status >= 400 && r.status < 500) throw new Error(`registration: HTTP ${r.status} ${r.text.slice(0, 300)}`);
      return { why: `HTTP ${r.status} ${r.text.slice(0, 200)}` };
    },
    { deadline, child: s.child, intervalMs: 500 },
  );
  return r;
}

/** First call of a scenario, retried until it succeeds (the ingress may learn the new deployment a bit later). */
async function probe(s, scenario, opts) {
  const sc = SCENARIOS[scenario];
  const deadline = Date.now() + Math.max(opts.startTimeoutMs, 5000);
  return waitFor(
    `${s.target} first ${scenario} call`,
    async () => {
      const r = await httpCall('POST', s.ingress + sc.path, { body: sc.body, timeoutMs: opts.requestTimeoutMs });
      if (r.status >= 200 && r.status < 300 && r.text.includes(sc.expect)) return { ok: true };
      if (r.status >= 200 && r.status < 300) return { why: `unexpected body (want ${sc.expect}): ${r.text.slice(0, 200)}` };
      return { why: r.status ? `HTTP ${r.status} ${r.text.slice(0, 200)}` : r.text };
    },
    { deadline, child: s.child, intervalMs: 300 },
  );
}

function runLoad(node, spec, hardTimeoutMs) {
  return new Promise((res) => {
    const child = spawn(node, [join(BENCH_DIR, 'loadgen.mjs'), JSON.stringify(spec)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
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

// ---------------------------------------------------------------- main

const opts = parseArgs(process.argv.slice(2));
const node = pickNode();
mkdirSync(LOG_DIR, { recursive: true });

const meta = {
  date: new Date().toISOString(),
  host: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, memGiB: +(os.totalmem() / 2 ** 30).toFixed(1) },
  orchestratorNode: process.version,
  loadNode: node,
  options: { ...opts },
};
try {
  const { execFileSync } = await import('node:child_process');
  meta.loadNodeVersion = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  meta.gitCommit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
} catch {
  /* optional */
}

log(
  `targets=${opts.targets.join(',')} scenarios=${opts.scenarios.join(',')} concurrency=${opts.concurrency.join(',')} ` +
    `duration=${opts.durationMs / 1000}s node(service, load)=${meta.loadNodeVersion ?? node}`,
);

const targets = {}; // target → { status, error?, version?, logFile }
const results = []; // { target, scenario, concurrency, ...loadgen result | error }

for (const target of opts.targets) {
  const info = (targets[target] = { status: 'starting' });
  let service;
  let server;
  try {
    service = await startService(node, target);
    log(`${target}: service endpoint at ${service.url}`);
    server = await startServer(target, opts);
    info.version = server.version;
    info.logFile = server.logFile;
    info.pid = server.pid;
    log(`${target}: up (pid ${server.pid}, version ${server.version ?? '?'}, ingress ${server.ingress}, admin ${server.admin})`);
    await register(server, service.url, opts);
    log(`${target}: registered ${service.url}`);
    info.status = 'ok';
  } catch (e) {
    const s = e.server ?? server;
    info.status = 'failed';
    info.error = e.message;
    if (s) {
      info.logFile = s.logFile;
      info.logTail = tail(s.logFile);
    }
    log(`${target}: FAILED: ${e.message}${info.logTail ? `\n--- ${s.logFile} (tail)\n${info.logTail}\n---` : ''}`);
    if (s?.child) await stopGroup(s.child);
    if (s?.dataDir && !opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
    if (service) await stopGroup(service.child);
    for (const scenario of opts.scenarios)
      for (const c of opts.concurrency) results.push({ target, scenario, concurrency: c, error: `server not started: ${e.message}` });
    continue;
  }

  const probeError = {};
  for (const scenario of opts.scenarios) {
    try {
      await probe(server, scenario, opts);
    } catch (e) {
      probeError[scenario] = e.message;
      log(`${target}: ${e.message}`);
      if (server.child.exited) break;
      continue;
    }
    if (opts.warmupMs > 0) {
      log(`${target}: warmup ${scenario} ${opts.warmupMs / 1000}s`);
      await runLoad(
        node,
        {
          url: server.ingress + SCENARIOS[scenario].path,
          body: SCENARIOS[scenario].body,
          expect: SCENARIOS[scenario].expect,
          concurrency: 16,
          warmupMs: 0,
          durationMs: opts.warmupMs,
          requestTimeoutMs: opts.requestTimeoutMs,
        },
        opts.warmupMs + opts.requestTimeoutMs + 15000,
      );
    }
  }

  // Idle baseline: background CPU of the server tree with no load (ms of CPU per second).
  if (opts.idleMs > 0 && !server.child.exited) {
    const pids = { server: server.pid, service: service.child.pid };
    const a = sampleCpu(pids);
    const t0 = process.hrtime.bigint();
    await sleep(opts.idleMs);
    const b = sampleCpu(pids);
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    if (a.server != null && b.server != null) info.idleCpuMsPerSec = (b.server - a.server) / secs;
    log(`${target}: idle server CPU ${fmt(info.idleCpuMsPerSec, 1)} ms/s`);
  }

  for (const scenario of opts.scenarios) {
    for (const c of opts.concurrency) {
      const row = { target, scenario, concurrency: c };
      if (server.child.exited) {
        row.error = `server exited (${fmtExit(server.child.exited)})`;
      } else if (probeError[scenario]) {
        row.error = probeError[scenario];
      } else {
        const sc = SCENARIOS[scenario];
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
            pids: { server: server.pid, service: service.child.pid },
          },
          opts.runWarmupMs + opts.durationMs + 2 * opts.requestTimeoutMs + 15000,
        );
        if (r.failed) row.error = r.failed;
        else {
          Object.assign(row, r);
          // CPU per invocation minus what the server burns when idle (timers, flushes, update checks, ...).
          if (info.idleCpuMsPerSec != null && r.cpuMs.server != null && r.ok > 0)
            row.cpuMsPerInvocation.serverNetOfIdle = Math.max(0, r.cpuMs.server - (info.idleCpuMsPerSec * r.elapsedMs) / 1000) / r.ok;
        }
        if (server.child.exited) row.error = `server exited during the run (${fmtExit(server.child.exited)})`;
      }
      results.push(row);
      log(
        `${target} ${scenario} c=${c}: ` +
          (row.error && row.ok === undefined
            ? `ERROR ${row.error}`
            : `${fmt(row.rps, 1)} req/s p50 ${fmt(row.latencyMs.p50, 2)} ms p99 ${fmt(row.latencyMs.p99, 2)} ms ` +
              `cpu ${fmt(row.cpuMsPerInvocation.server, 3)} ms/inv ok ${row.ok} errors ${row.errors}` +
              (row.errors ? ` (${Object.entries(row.errorKinds).map(([k, n]) => `${k}×${n}`).join(', ')})` : '')),
      );
    }
  }
  if (server.child.exited) {
    info.status = 'crashed';
    info.error = `exited during the benchmark (${fmtExit(server.child.exited)})`;
    info.logTail = tail(server.logFile);
  }
  await stopGroup(server.child);
  await stopGroup(service.child);
  if (!opts.keepDirs) rmSync(server.dataDir, { recursive: true, force: true });
  else log(`${target}: data dir kept at ${server.dataDir}`);
}

// ---------------------------------------------------------------- report

function fmt(v, digits) {
  return v == null || Number.isNaN(v) ? '-' : v.toFixed(digits);
}
const ratio = (a, b) => (a != null && b != null && b > 0 ? a / b : null);
const find = (t, s, c) => results.find((r) => r.target === t && r.scenario === s && r.concurrency === c);
const good = (r) => r && r.ok !== undefined && r.ok > 0;

const ratios = [];
const lines = [];
const cols = ['target', 'req/s', 'p50 ms', 'p99 ms', 'srv CPU ms/inv', '(net of idle)', 'svc CPU ms/inv', 'ok', 'errors'];
const widths = [12, 10, 9, 9, 15, 14, 15, 8, 8];
const row = (cells) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join(' ');

for (const scenario of opts.scenarios) {
  for (const c of opts.concurrency) {
    lines.push('', `== ${scenario} (${SCENARIOS[scenario].path}), concurrency ${c}`, row(cols), row(widths.map((w) => '-'.repeat(w))));
    for (const t of opts.targets) {
      const r = find(t, scenario, c);
      if (!r || r.ok === undefined) {
        lines.push(`${t.padEnd(widths[0])} ERROR: ${r?.error ?? 'not run'}`);
        continue;
      }
      lines.push(
        row([
          t,
          fmt(r.rps, 1),
          fmt(r.latencyMs.p50, 2),
          fmt(r.latencyMs.p99, 2),
          fmt(r.cpuMsPerInvocation.server, 3),
          fmt(r.cpuMsPerInvocation.serverNetOfIdle, 3),
          fmt(r.cpuMsPerInvocation.service, 3),
          r.ok,
          r.errors,
        ]),
      );
      if (r.errors) lines.push(`${''.padEnd(widths[0])}   errors: ${Object.entries(r.errorKinds).map(([k, n]) => `${k}×${n}`).join(', ')}; e.g. ${r.errorSamples[0]}`);
      if (r.error) lines.push(`${''.padEnd(widths[0])}   ${r.error}`);
    }
    const base = find('restate', scenario, c);
    for (const t of opts.targets.filter((t) => t.startsWith('keel'))) {
      const k = find(t, scenario, c);
      const rr = {
        scenario,
        concurrency: c,
        target: t,
        throughput: good(k) && good(base) ? ratio(k.rps, base.rps) : null,
        p50: good(k) && good(base) ? ratio(k.latencyMs.p50, base.latencyMs.p50) : null,
        p99: good(k) && good(base) ? ratio(k.latencyMs.p99, base.latencyMs.p99) : null,
        cpuPerInvocation: good(k) && good(base) ? ratio(k.cpuMsPerInvocation.server, base.cpuMsPerInvocation.server) : null,
      };
      ratios.push(rr);
      if (opts.targets.includes('restate'))
        lines.push(
          `${t}/restate: throughput ${rr.throughput == null ? 'n/a' : fmt(rr.throughput, 2) + 'x'}, ` +
            `p50 ${rr.p50 == null ? 'n/a' : fmt(rr.p50, 2) + 'x'}, p99 ${rr.p99 == null ? 'n/a' : fmt(rr.p99, 2) + 'x'}, ` +
            `CPU/inv ${rr.cpuPerInvocation == null ? 'n/a' : fmt(rr.cpuPerInvocation, 2) + 'x'}` +
            `   (throughput > 1 and p50 < 1 mean Keel is better)`,
        );
    }
  }
}
lines.push('');
for (const t of opts.targets) {
  const i = targets[t];
  lines.push(
    `${t}: ${i.status}${i.version ? ` (version ${i.version})` : ''}` +
      `${i.idleCpuMsPerSec != null ? `, idle server CPU ${fmt(i.idleCpuMsPerSec, 1)} ms/s` : ''}${i.error ? ` — ${i.error}` : ''}${i.logFile ? `; log ${i.logFile}` : ''}`,
  );
}
console.log(
  `\nKeel vs Restate — ${meta.host.cpus} CPUs, duration ${opts.durationMs / 1000}s per cell, closed loop, ` +
    `load/service on ${meta.loadNodeVersion ?? node}` + lines.join('\n'),
);

mkdirSync(dirname(opts.out), { recursive: true });
writeFileSync(opts.out, JSON.stringify({ meta, targets, results, ratios }, null, 2) + '\n');
log(`results written to ${opts.out}`);
process.exit(0);
