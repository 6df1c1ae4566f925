// Builds and runs the cross-SDK test services (test/sdks/<sdk>/) and the Greeter examples
// (examples/greeter-<sdk>/) as child processes: each SDK's build.sh caches its output outside the
// clone, run.sh execs the service so a SIGKILL reaches the service itself.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, tempDir } from './keel.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * The SDK variants the suite runs: the directory of their services, the environment their run.sh
 * takes, and the service protocol versions their endpoint announces (checked at discovery).
 */
const RUST_NO_METADATA = "restate-sdk's TerminalError has no metadata: it always sends an empty list (src/errors.rs, 0.10 and 0.13)";

const JAVA_NO_METADATA = 'sdk-java 2.4.0 (the newest on Maven Central here) has no TerminalException metadata (added in 2.7.0)';
const JAVA_NO_SIGNALS = 'sdk-java 2.4.0 has no named-signal API (Context has awakeables only; the signal handles of sdk-core are internal)';
const JAVA_UNSUPPORTED = { 'terminal error metadata': JAVA_NO_METADATA, 'named signals': JAVA_NO_SIGNALS };

export const SDKS = {
  ts: { dir: 'test/sdks/ts', protocol: [5, 7], http1: true },
  go: { dir: 'test/sdks/go', protocol: [5, 7] },
  python: { dir: 'test/sdks/python', protocol: [5, 7], http1: true },
  // sdk-java 2.4.0 is the newest Maven Central serves here: v5–v6 on every JDK (the native core
  // that brings v7 on Java >= 23 came in 2.9).
  java: { dir: 'test/sdks/java', protocol: [5, 6], http1: true, env: { JAVA_VERSION: '25' }, unsupported: JAVA_UNSUPPORTED },
  java17: { dir: 'test/sdks/java', protocol: [5, 6], http1: true, env: { JAVA_VERSION: '17' }, unsupported: JAVA_UNSUPPORTED },
  rust: { dir: 'test/sdks/rust', protocol: [5, 7], unsupported: { 'terminal error metadata': RUST_NO_METADATA } },
  'rust-v5': {
    dir: 'test/sdks/rust-v5',
    protocol: [5, 5],
    unsupported: {
      'terminal error metadata': RUST_NO_METADATA,
      'named signals': 'restate-sdk 0.10 has no named-signal API (its InvocationHandle has invocation_id and cancel only)',
    },
  },
};

const built = new Set();

/** Runs a build.sh once per process; its failure (a missing toolchain says what to install) fails the caller. */
export function build(dir) {
  if (built.has(dir)) return;
  const script = path.join(root, dir, 'build.sh');
  if (!fs.existsSync(script)) return;
  const started = Date.now();
  const r = spawnSync('bash', [script], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 1_200_000 });
  if (r.status !== 0) throw new Error(`${dir}/build.sh failed (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
  built.add(dir);
  return Date.now() - started;
}

function listening(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}

/**
 * Starts an endpoint process from `dir` (its run.sh, or `node <main>` for TypeScript) and
 * resolves once its port accepts connections. Returns { uri, port, recorded(prefix), output(),
 * kill(signal), restart() }; `t.teardown` kills it.
 */
export async function startEndpoint(t, dir, { env = {}, port, recordFile, main = 'services.mjs' } = {}) {
  build(dir);
  const records = recordFile ?? path.join(tempDir(t, 'keel-sdk-'), 'records.txt');
  const ep = {
    port: port ?? (await freePort()),
    proc: undefined,
    out: '',
    get uri() { return `http://127.0.0.1:${ep.port}/`; },
    output() { return ep.out; },
    /** The recorded lines that start with `prefix`. */
    recorded(prefix = '') {
      if (!fs.existsSync(records)) return [];
      return fs.readFileSync(records, 'utf8').split('\n').filter((l) => l !== '' && l.startsWith(prefix));
    },
    async launch() {
      const runSh = path.join(root, dir, 'run.sh');
      const [cmd, args] = fs.existsSync(runSh) ? ['bash', [runSh]] : [process.execPath, [path.join(root, dir, main)]];
      const proc = spawn(cmd, args, {
        cwd: path.join(root, dir),
        env: { ...process.env, ...env, PORT: String(ep.port), RECORD_FILE: records },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      ep.proc = proc;
      proc.stdout.on('data', (d) => (ep.out = (ep.out + d).slice(-64_000)));
      proc.stderr.on('data', (d) => (ep.out = (ep.out + d).slice(-64_000)));
      ep.exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
      const deadline = Date.now() + 60_000;
      while (!(await listening(ep.port))) {
        if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`${dir} exited early:\n${ep.out}`);
        if (Date.now() > deadline) throw new Error(`${dir} did not listen on ${ep.port} in 60 s:\n${ep.out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async kill(signal = 'SIGKILL') {
      if (!ep.proc || ep.proc.exitCode !== null || ep.proc.signalCode !== null) return;
      ep.proc.kill(signal);
      await ep.exited;
    },
    /** SIGKILL, then the same process again on the same port (its in-memory counters start over). */
    async restart() {
      await ep.kill('SIGKILL');
      await ep.launch();
    },
  };
  await ep.launch();
  t.teardown(() => {
    if (!t.passing()) t.comment(`last lines of ${dir}:\n${ep.out.split('\n').slice(-30).join('\n')}`);
    return ep.kill('SIGKILL');
  });
  return ep;
}

/** The SDK named by `KEEL_SDK` (comma-separated) runs; unset, every one does. */
export function selected(sdk) {
  const only = process.env.KEEL_SDK;
  return !only || only.split(',').includes(sdk);
}
