// Runs a real Keel server (node dist/main.js) as a child process on free loopback ports with a
// temporary data directory, and real SDK service endpoints in the test process.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as restate from '@restatedev/restate-sdk';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function bindable(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/**
 * A port below Linux's ephemeral range (32768–60999): one the kernel picks for `listen(0)` it may
 * give a moment later to an outgoing connection, and Keel's bind then fails (RT0004).
 */
export async function freePort() {
  for (let i = 0; i < 100; i++) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    if (await bindable(port)) return port;
  }
  throw new Error('no free port in 20000–31999 after 100 tries');
}

export function tempDir(t, prefix = 'keel-test-') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Starts Keel; resolves once both ports answer. `t.teardown` stops it.
 * Returns { ingress, admin, dir, logs(), kill(signal), restart(), stop() }.
 */
export async function startKeel(t, { env = {}, dir = tempDir(t), nodePath = process.execPath, args = [] } = {}) {
  let ingressPort = await freePort();
  let adminPort = await freePort();
  let pgsqlPort = await freePort();
  const keel = {
    dir,
    ingress: `http://127.0.0.1:${ingressPort}`,
    admin: `http://127.0.0.1:${adminPort}`,
    /** The PostgreSQL wire protocol (psql, pg). */
    pgsql: { host: '127.0.0.1', port: pgsqlPort },
    output: '',
    proc: undefined,
    logs() {
      return keel.output;
    },
    /** Keel's JSON log lines carrying `code`, optionally only those about one invocation. */
    logLines(code, invocation) {
      const out = [];
      for (const line of keel.output.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const j = JSON.parse(line);
          if (j.code === code && (invocation === undefined || j.invocation === invocation)) out.push(j);
        } catch {}
      }
      return out;
    },
    /** What Keel wrote that is not a JSON log line (Node's own warnings would be). */
    looseLines() {
      return keel.output.split('\n').filter((line) => line.trim() !== '' && !line.startsWith('{'));
    },
    async launch() {
      // Only this launch's output counts: after a restart the old "keel is ready" is still there.
      const from = keel.output.length;
      const proc = spawn(nodePath, [path.join(root, 'dist/main.js'), ...args], {
        cwd: dir,
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          KEEL_BASE_DIR: path.join(dir, 'data'),
          KEEL_INGRESS__BIND_ADDRESS: `127.0.0.1:${ingressPort}`,
          KEEL_ADMIN__BIND_ADDRESS: `127.0.0.1:${adminPort}`,
          KEEL_ADMIN__QUERY_ENGINE__PGSQL_BIND_ADDRESS: `127.0.0.1:${pgsqlPort}`,
          KEEL_LOG__FORMAT: 'json',
          // One event loop (auto's choice below 4 cores), whatever the machine: a suite runs the same
          // path on every machine. Against partition threads: KEEL_TEST_THREADS=3 make test (a file of it),
          // and threads-suites.test.mjs / partition-threads.test.mjs in every run.
          KEEL_WORKER__THREADS: process.env.KEEL_TEST_THREADS || '1',
          ...env,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      keel.proc = proc;
      proc.stdout.on('data', (d) => (keel.output += d));
      proc.stderr.on('data', (d) => (keel.output += d));
      const exited = new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
      keel.exited = exited;
      const deadline = Date.now() + 20_000;
      for (;;) {
        const early = await Promise.race([exited, new Promise((r) => setTimeout(() => r(undefined), 100))]);
        if (early) throw new Error(`keel exited early (${JSON.stringify(early)}):\n${keel.output}`);
        if (keel.output.indexOf('keel is ready', from) >= 0) return;
        if (Date.now() > deadline) throw new Error(`keel did not start:\n${keel.output}`);
      }
    },
    async kill(signal = 'SIGKILL') {
      if (!keel.proc || keel.proc.exitCode !== null || keel.proc.signalCode !== null) return;
      keel.proc.kill(signal);
      await keel.exited;
    },
    async restart() {
      await keel.kill('SIGKILL');
      await keel.launch();
    },
    async stop() {
      await keel.kill('SIGTERM');
    },
  };
  // A free port can be taken by another test between freePort() and Keel's bind (RT0004): the
  // first start tries other ports, twice at most.
  for (let attempt = 0; ; attempt++) {
    try {
      await keel.launch();
      break;
    } catch (err) {
      if (attempt >= 2 || !/RT0004[^\n]*address in use/.test(String(err?.message))) throw err;
      [ingressPort, adminPort, pgsqlPort] = [await freePort(), await freePort(), await freePort()];
      keel.ingress = `http://127.0.0.1:${ingressPort}`;
      keel.admin = `http://127.0.0.1:${adminPort}`;
      keel.pgsql = { host: '127.0.0.1', port: pgsqlPort };
    }
  }
  t.teardown(() => {
    // A failing test shows what Keel said: CI has nothing else to go by.
    if (!t.passing()) t.comment(`last lines of Keel's log:\n${keel.output.split('\n').slice(-40).join('\n')}`);
    return keel.kill('SIGKILL');
  });
  return keel;
}

/**
 * Serves SDK services over HTTP/2 cleartext (bidirectional); returns the endpoint URI.
 * `identityKeys`: the endpoint accepts only requests signed by one of these keys.
 */
export async function serveServices(t, services, { http1 = false, identityKeys } = {}) {
  const handler = restate.createEndpointHandler({ services, ...(identityKeys ? { identityKeys } : {}) });
  if (!http1) return serveHandler(t, handler);
  const http = await import('node:http');
  const server = http.createServer(handler);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${server.address().port}/`;
}

/** Serves `handler(req, res)` over HTTP/2 cleartext on a free port, its sessions destroyed at teardown; returns the URI. */
export async function serveHandler(t, handler) {
  const server = http2.createServer(handler);
  const sessions = new Set();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => (sessions.forEach((s) => s.destroy()), server.close(() => resolve()))));
  return `http://127.0.0.1:${server.address().port}/`;
}

/** Any request to the admin API; returns { status, text, json (when the body parses) }. */
export async function adminCall(keel, method, pathname, body) {
  const res = await fetch(keel.admin + pathname, {
    method,
    headers: body !== undefined ? { 'content-type': 'application/json' } : {},
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {}
  return { status: res.status, text, json };
}

/** SQL on the admin API (`POST /query`, JSON rows); throws unless it answers 200. */
export async function query(keel, sql) {
  const res = await fetch(`${keel.admin}/query`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ query: sql }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`query ${res.status}: ${text}`);
  return JSON.parse(text).rows;
}

export async function register(keel, uri, extra = {}) {
  const res = await fetch(`${keel.admin}/deployments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ uri, ...extra }),
  });
  const body = await res.json();
  if (res.status >= 300) throw new Error(`register failed ${res.status}: ${JSON.stringify(body)}`);
  return body;
}

/** POSTs JSON to the ingress; returns { status, headers, body (parsed JSON or text) }. */
export async function ingress(keel, pathname, body, headers = {}) {
  const res = await fetch(`${keel.ingress}${pathname}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: res.status, headers: res.headers, body: parsed };
}

export async function eventually(f, { timeout_ms = 15_000, interval_ms = 50 } = {}) {
  const deadline = Date.now() + timeout_ms;
  let last;
  for (;;) {
    try {
      const v = await f();
      if (v) return v;
      last = v;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`condition not met in time (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, interval_ms));
  }
}
