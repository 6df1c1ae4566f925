// Slow and idle clients cannot hold the servers: idle and half-open connections are closed
// after http.idle_timeout (never one with a request in flight), slow headers and bodies are
// answered 408 (KEEL0408) after http.header_timeout / http.request_timeout, connections are
// bounded by http.max_connections, and 500 idle connections do not stop Keel answering others.
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import * as restate from '@restatedev/restate-sdk';
import { execFileSync } from 'node:child_process';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { systemNode } from './helpers/keel-cli.mjs';

/** Keel runs on the Node on PATH (20) in production, the tests' Node is 24: their HTTP servers differ, so both are tried. */
const NODES = [...new Set([process.execPath, systemNode()])].map((p) => ({ path: p, version: execFileSync(p, ['--version']).toString().trim() }));

const slow = restate.service({
  name: 'Slow',
  handlers: {
    // Silent on the client's connection for longer than the idle timeout.
    run: async (ctx, ms) => {
      await ctx.run('wait', () => new Promise((r) => setTimeout(r, ms)));
      return `waited ${ms}`;
    },
  },
});

const LIMITS = {
  KEEL_HTTP__IDLE_TIMEOUT: '3s',
  KEEL_HTTP__HEADER_TIMEOUT: '1s',
  KEEL_HTTP__REQUEST_TIMEOUT: '2s',
  KEEL_HTTP__MAX_CONNECTIONS: '600',
};

/** Opens a raw connection; resolves once connected, with what it received and whether it closed. */
function connect(base) {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const state = { socket: undefined, data: '', closed: false, closedAt: 0 };
    const s = net.connect(Number(port), hostname, () => resolve(state));
    state.socket = s;
    s.on('data', (d) => (state.data += d));
    s.on('error', () => {});
    s.on('close', () => {
      state.closed = true;
      state.closedAt = Date.now();
    });
    s.once('error', reject);
  });
}

function coded(state) {
  const body = state.data.slice(state.data.indexOf('\r\n\r\n') + 4);
  try {
    return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(state.data)?.[1]), body: JSON.parse(body) };
  } catch {
    return { status: Number(/^HTTP\/1\.1 (\d+)/.exec(state.data)?.[1]), body: undefined };
  }
}

for (const node of NODES) t.test(`500 idle connections (Node ${node.version}): others are still answered, the idle ones are closed`, async (t) => {
  const keel = await startKeel(t, { env: LIMITS, nodePath: node.path });
  await register(keel, await serveServices(t, [slow]));
  const idle = [];
  for (let i = 0; i < 500; i++) idle.push(await connect(keel.ingress));
  t.teardown(() => idle.forEach((c) => c.socket.destroy()));
  const openedAt = Date.now();

  t.equal((await fetch(`${keel.ingress}/restate/health`)).status, 200, 'the ingress answers');
  const r = await ingress(keel, '/Slow/run', 1);
  t.equal(r.status, 200);
  t.same(r.body, 'waited 1');
  t.equal((await fetch(`${keel.admin}/health`)).status, 200, 'the admin API answers');

  await eventually(() => idle.every((c) => c.closed), { timeout_ms: 20_000 });
  // Node 20 leaves a silent connection to the idle timeout (closed without a word); newer Node
  // counts the header timeout from the connection (a coded 408).
  const answers = new Set(idle.map((c) => (c.data === '' ? 'closed' : `${coded(c).status} ${coded(c).body?.restate_code}`)));
  t.ok([...answers].every((a) => a === 'closed' || a === '408 KEEL0408'), `closed silently or with 408 KEEL0408: ${[...answers]}`);
  const first = Math.min(...idle.map((c) => c.closedAt)) - openedAt;
  t.pass(`all 500 closed by the server (the first ${first} ms after the last was opened)`);
});

t.test('a call in flight keeps its connection however long it is silent; a kept-alive idle one is closed', async (t) => {
  const keel = await startKeel(t, { env: { ...LIMITS, KEEL_HTTP__IDLE_TIMEOUT: '1s' } });
  await register(keel, await serveServices(t, [slow]));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.teardown(() => agent.destroy());
  const sockets = new Set();
  const res = await new Promise((resolve, reject) => {
    const req = http.request(`${keel.ingress}/Slow/run`, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (r) => {
      let body = '';
      r.on('data', (d) => (body += d));
      r.on('end', () => resolve({ status: r.statusCode, body }));
    });
    req.on('socket', (s) => sockets.add(s));
    req.on('error', reject);
    req.end('2500');
  });
  t.equal(res.status, 200, '2.5 s of silence on a connection with a 1 s idle timeout: still answered');
  t.equal(res.body, '"waited 2500"');
  const [socket] = sockets;
  const closed = await eventually(() => socket.destroyed || socket.closed, { timeout_ms: 10_000 });
  t.ok(closed, 'the kept-alive connection is closed once idle');
});

t.test('slow headers and slow bodies are answered 408 (KEEL0408) and closed', async (t) => {
  const keel = await startKeel(t, { env: LIMITS });
  const headers = await connect(keel.ingress);
  headers.socket.write('POST /Slow/run HTTP/1.1\r\nhost: x\r\n');
  const body = await connect(keel.ingress);
  body.socket.write('POST /Slow/run HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"0123');
  const admin = await connect(keel.admin);
  admin.socket.write('GET /deployments HTTP/1.1\r\nhost: x\r\nx-slow');
  await eventually(() => headers.closed && body.closed && admin.closed, { timeout_ms: 15_000 });
  for (const [name, c, shape] of [['slow headers', headers, 'ingress'], ['slow body', body, 'ingress'], ['admin slow headers', admin, 'admin']]) {
    const r = coded(c);
    t.equal(r.status, 408, `${name}: ${c.data.slice(0, 300)}`);
    t.equal(r.body?.restate_code, 'KEEL0408', name);
    if (shape === 'ingress') t.equal(r.body?.code, 408, `${name}: the ingress shape`);
  }
});

t.test('http.max_connections bounds connections; freed ones are taken again', async (t) => {
  const keel = await startKeel(t, { env: { ...LIMITS, KEEL_HTTP__MAX_CONNECTIONS: '20', KEEL_HTTP__IDLE_TIMEOUT: '1m' } });
  const held = [];
  for (let i = 0; i < 25; i++) held.push(await connect(keel.ingress));
  t.teardown(() => held.forEach((c) => c.socket.destroy()));
  await eventually(() => held.filter((c) => c.closed).length === 5, { timeout_ms: 10_000 });
  t.equal(held.filter((c) => !c.closed).length, 20, 'the 5 over the limit were closed at once');
  t.ok(await eventually(() => keel.output.includes('http.max_connections reached')), 'and logged');
  held.forEach((c) => c.socket.destroy());
  const r = await eventually(async () => (await fetch(`${keel.ingress}/restate/health`).catch(() => undefined))?.status === 200);
  t.ok(r, 'once they are gone, new connections are served');
});
