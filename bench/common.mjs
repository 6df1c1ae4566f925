// Small helpers shared by the benchmark modules: paths, logging, HTTP with a timeout, polling, ports.
import { existsSync, readFileSync } from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(BENCH_DIR, '..');
export const RESULTS_DIR = join(BENCH_DIR, 'results');
export const LOG_DIR = join(RESULTS_DIR, 'logs');

export const log = (msg) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

export function fmt(v, digits) {
  return v == null || Number.isNaN(v) ? '-' : v.toFixed(digits);
}

export function median(xs) {
  const s = xs.filter((x) => x != null).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** The service, the load generator and the micro-benchmark need Node >= 22 (the pinned Node 24 under npm). */
export function pickNode() {
  if (process.env.BENCH_NODE) return process.env.BENCH_NODE;
  if (Number(process.versions.node.split('.')[0]) >= 22) return process.execPath;
  const pinned = join(ROOT, 'node_modules', 'node', 'bin', 'node');
  if (existsSync(pinned)) return pinned;
  return process.execPath;
}

/**
 * Ports handed to the servers come from below Linux's ephemeral range (32768–60999 by default):
 * a port the kernel picks for `listen(0)` is one it may also give, a moment later, to an outgoing
 * connection of the load generator or a service, and the server's bind then fails (RT0004).
 */
const PORT_MIN = 20000;
const PORT_SPAN = 12000;
const PORT_TRIES = 100;

function bindable(port) {
  return new Promise((res) => {
    const s = net.createServer();
    s.unref();
    s.once('error', () => res(false));
    s.listen(port, '127.0.0.1', () => s.close(() => res(true)));
  });
}

export async function freePort() {
  for (let i = 0; i < PORT_TRIES; i++) {
    const port = PORT_MIN + Math.floor(Math.random() * PORT_SPAN);
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port in ${PORT_MIN}–${PORT_MIN + PORT_SPAN - 1} after ${PORT_TRIES} tries`);
}

// eslint-disable-next-line no-control-regex
export const stripAnsi = (t) => t.replace(/\x1b\[[0-9;]*m/g, '');

export function tail(file, lines = 15) {
  try {
    return stripAnsi(readFileSync(file, 'utf8'))
      .split('\n')
      .filter((l) => l.trim())
      .slice(-lines)
      .join('\n');
  } catch {
    return '';
  }
}

/** One HTTP/1.1 request without keep-alive; never throws: `{status, text}` (status 0 on a network error or timeout). */
export function httpCall(method, urlStr, { body, timeoutMs = 5000, headers = {} } = {}) {
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

export const fmtExit = (e) => (e.error ? e.error : e.signal ? `signal ${e.signal}` : `code ${e.code}`);

/** Polls until fn() returns `{ok: true, ...}`; aborts when `child` exits or the deadline passes. */
export async function waitFor(what, fn, { deadline, child, intervalMs = 200 }) {
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

/** `POST /query` on the admin port (Restate and Keel both serve it); the rows, or throws. */
export async function sqlQuery(admin, query, timeoutMs = 5000) {
  const r = await httpCall('POST', `${admin}/query`, { body: { query }, headers: { accept: 'application/json' }, timeoutMs });
  if (r.status !== 200) throw new Error(`query: ${r.status ? `HTTP ${r.status} ${r.text.slice(0, 200)}` : r.text}`);
  return JSON.parse(r.text).rows;
}
