// The servers under test and the SDK service they call: start, wait until healthy, register, first call.
//   restate      – restate-server 1.7.12 from node_modules (@restatedev/restate-server) with its default settings
//   keel         – node dist/main.js with Keel's defaults (worker.storage_db.fsync = true)
//   keel-nofsync – the same with KEEL_WORKER__STORAGE_DB__FSYNC=false
//   relay        – bench/relay.mjs: the protocol relayed and nothing kept (the floor; load cells only)
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import { join, resolve } from 'node:path';
import { spawnGroup } from './children.mjs';
import { BENCH_DIR, LOG_DIR, ROOT, freePort, httpCall, nowMs, tail, waitFor } from './common.mjs';

export const ALL_TARGETS = ['restate', 'keel', 'keel-nofsync', 'relay'];
export const isKeel = (target) => target.startsWith('keel');

/**
 * Keel's partition threads in this run: KEEL_WORKER__THREADS passes through to the server; unset is
 * Keel's default, `auto` (one per core its taskset allows where it allows 4 or more, else one event
 * loop for every partition).
 */
export const keelThreads = () => process.env.KEEL_WORKER__THREADS ?? 'auto';

/** Where the servers' data dirs go (a real disk, so that fsync costs what it costs). */
export const dataRoot = () => process.env.BENCH_TMPDIR ?? os.tmpdir();

/** A log file under LOG_DIR, emptied unless appended to; a clean clone has no LOG_DIR until something makes it. */
function logFileFor(name, { append = false } = {}) {
  mkdirSync(LOG_DIR, { recursive: true });
  const file = join(LOG_DIR, name);
  if (!append) writeFileSync(file, '');
  return file;
}

export async function startService(node, tag, { env = {} } = {}) {
  const port = await freePort();
  const logFile = logFileFor(`service-${tag}.log`);
  // stdout (the Greeter's console.log per call) is discarded; stderr goes to the log.
  const child = spawnGroup(node, [join(BENCH_DIR, 'service.mjs'), String(port)], {
    env: { ...process.env, RESTATE_LOGGING: process.env.RESTATE_LOGGING ?? 'WARN', ...env },
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

/** Ports and a fresh data dir for one server; `spawnServer` can start it (again) on them. */
export async function newServer(target, { logName = target, appendLog = false } = {}) {
  const [ingressPort, adminPort, nodePort, pgsqlPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const logFile = logFileFor(`${logName}.log`, { append: appendLog });
  return {
    target,
    ingressPort,
    adminPort,
    nodePort,
    pgsqlPort,
    ingress: `http://127.0.0.1:${ingressPort}`,
    // The relay has no admin API: its health answers on the ingress port.
    admin: `http://127.0.0.1:${target === 'relay' ? ingressPort : adminPort}`,
    dataDir: mkdtempSync(join(dataRoot(), `bench-${target}-`)),
    logFile,
  };
}

/**
 * The real restate-server binary of the npm package. `node_modules/.bin/restate-server` is a Node wrapper that
 * spawns it: starting the binary directly keeps the wrapper's Node boot out of startup times, and a SIGTERM
 * reaches the server once (not once from us and once more from the wrapper).
 */
export function restateBinary() {
  const direct = join(ROOT, 'node_modules', '@restatedev', `restate-server-${os.platform()}-${os.arch()}`, 'bin', 'restate-server');
  if (existsSync(direct)) return direct;
  const wrapper = join(ROOT, 'node_modules', '.bin', 'restate-server');
  if (existsSync(wrapper)) return wrapper;
  throw new Error(`restate-server not found in node_modules (npm ci?)`);
}

/**
 * Spawns the server process (own process group, log appended to s.logFile); s.spawnedAt is the clock for startup
 * times. `s.configFile`, when set, is the server's TOML config file (Restate: --config-file, Keel: --config).
 */
export function spawnServer(s) {
  let cmd;
  let env;
  if (s.target === 'restate') {
    cmd = restateBinary();
    env = {
      ...process.env,
      RESTATE_ADMIN__BIND_ADDRESS: `127.0.0.1:${s.adminPort}`,
      RESTATE_INGRESS__BIND_ADDRESS: `127.0.0.1:${s.ingressPort}`,
      RESTATE_BIND_ADDRESS: `127.0.0.1:${s.nodePort}`,
      RESTATE_ADVERTISED_ADDRESS: `http://127.0.0.1:${s.nodePort}`,
      RESTATE_BASE_DIR: s.dataDir,
    };
    s.cmd = cmd;
    s.args = s.configFile ? ['--config-file', s.configFile] : [];
  } else if (s.target === 'relay') {
    env = process.env;
    s.cmd = 'node';
    s.args = [join(BENCH_DIR, 'relay.mjs'), s.serviceUrl, String(s.ingressPort)];
  } else {
    const main = resolve(process.env.BENCH_KEEL_MAIN ?? join(ROOT, 'dist', 'main.js'));
    if (!existsSync(main)) throw new Error(`${main} not found (run \`make build\`)`);
    env = {
      ...process.env,
      KEEL_INGRESS__BIND_ADDRESS: `127.0.0.1:${s.ingressPort}`,
      KEEL_ADMIN__BIND_ADDRESS: `127.0.0.1:${s.adminPort}`,
      KEEL_ADMIN__QUERY_ENGINE__PGSQL_BIND_ADDRESS: `127.0.0.1:${s.pgsqlPort}`,
      KEEL_BASE_DIR: s.dataDir,
      // As `make run` starts it (README.md, "The store is the state").
      MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? '2',
      // A cell's own settings (bench/cluster.mjs: a node of a cluster).
      ...(s.env ?? {}),
    };
    // `keel` runs with Keel's own default; only the other mode is forced.
    if (s.target === 'keel-nofsync') env.KEEL_WORKER__STORAGE_DB__FSYNC = 'false';
    else delete env.KEEL_WORKER__STORAGE_DB__FSYNC;
    // `node` from PATH: under npm scripts (`make bench`) the pinned Node 24; `make run` starts the
    // server on the system node (Node 20 here), whose own boot is ~50-100 ms slower here.
    s.cmd = 'node';
    s.args = s.configFile ? [main, '--config', s.configFile] : [main];
  }
  // The scaling cell (scaling.mjs) pins the server to a CPU set; taskset execs it, so the pid is the server's.
  const [file, args] = s.cpuList ? ['taskset', ['-c', s.cpuList, s.cmd, ...s.args]] : [s.cmd, s.args];
  s.spawnedAt = nowMs();
  s.child = spawnGroup(file, args, { cwd: s.dataDir, logFile: s.logFile, env });
  s.pid = s.child.pid;
  return s;
}

const ok200 = async (url) => {
  const r = await httpCall('GET', url, { timeoutMs: 2000 });
  return r.status === 200 ? { ok: true } : { why: r.status ? `HTTP ${r.status}` : r.text };
};

/** Waits for admin /health (and Restate's ingress /restate/health); returns ms since spawn. */
export async function waitHealthy(s, { timeoutMs, intervalMs = 10 }) {
  const deadline = Date.now() + timeoutMs;
  await waitFor(`${s.target} admin health`, () => ok200(`${s.admin}/health`), { deadline, child: s.child, intervalMs });
  if (s.target === 'restate')
    await waitFor('restate ingress health', () => ok200(`${s.ingress}/restate/health`), { deadline, child: s.child, intervalMs });
  return nowMs() - s.spawnedAt;
}

export async function serverVersion(s) {
  try {
    return JSON.parse((await httpCall('GET', `${s.admin}/version`, { timeoutMs: 2000 })).text).version;
  } catch {
    return undefined;
  }
}

export async function register(s, serviceUrl, { timeoutMs }) {
  return waitFor(
    `${s.target} deployment registration`,
    async () => {
      const r = await httpCall('POST', `${s.admin}/deployments`, { body: { uri: serviceUrl }, timeoutMs: 10000 });
      if (r.status >= 200 && r.status < 300) return { ok: true, ...r };
      // 4xx will not get better by retrying
      if (r.status >= 400 && r.status < 500) throw new Error(`registration: HTTP ${r.status} ${r.text.slice(0, 300)}`);
      return { why: `HTTP ${r.status} ${r.text.slice(0, 200)}` };
    },
    { deadline: Date.now() + timeoutMs, child: s.child, intervalMs: 500 },
  );
}

/** One call retried until it succeeds (the ingress may learn a new deployment a moment later). */
export async function probe(s, { path, body, expect }, { timeoutMs, requestTimeoutMs }) {
  return waitFor(
    `${s.target} first call of ${path}`,
    async () => {
      const r = await httpCall('POST', s.ingress + path, { body, timeoutMs: requestTimeoutMs });
      if (r.status >= 200 && r.status < 300 && (!expect || r.text.includes(expect))) return { ok: true };
      if (r.status >= 200 && r.status < 300) return { why: `unexpected body (want ${expect}): ${r.text.slice(0, 200)}` };
      return { why: r.status ? `HTTP ${r.status} ${r.text.slice(0, 200)}` : r.text };
    },
    { deadline: Date.now() + Math.max(timeoutMs, 5000), child: s.child, intervalMs: 300 },
  );
}
