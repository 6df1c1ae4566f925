// Helpers for metadata/admin/cli tests: SDK endpoints over HTTP/2 and HTTP/1.1, raw manifest
// servers, temp storage and a Config pointing at it.
import http from 'node:http';
import http2 from 'node:http2';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import { loadConfig } from '../../dist/config/index.js';

export function tempDir(t, prefix = 'keel-meta-') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function testConfig(storagePath) {
  return loadConfig(undefined, {
    KEEL_BASE_DIR: storagePath, // the query engine's files too: never the working directory's
    KEEL_META__STORAGE_PATH: storagePath,
    KEEL_INGRESS__BIND_ADDRESS: '127.0.0.1:18080',
    KEEL_ADMIN__BIND_ADDRESS: '127.0.0.1:0',
  });
}

function listen(t, server) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      t.teardown(() => closeServer(server));
      resolve(port);
    });
  });
}

export function closeServer(server) {
  return new Promise((resolve) => {
    if (typeof server.closeAllConnections === 'function') server.closeAllConnections();
    for (const s of server.__sessions ?? []) s.destroy();
    server.close(() => resolve());
  });
}

/** Wraps an SDK endpoint handler with an optional header check (401 when missing). */
function guarded(handler, requiredHeader) {
  if (!requiredHeader) return handler;
  const [name, value] = requiredHeader;
  return (req, res) => {
    if (req.headers[name] !== value) {
      res.writeHead(401, { 'content-type': 'text/plain' });
      res.end('missing credentials');
      return;
    }
    return handler(req, res);
  };
}

/** SDK services over HTTP/2 cleartext (prior knowledge); returns the base URI. */
export async function serveH2(t, services, { requiredHeader, pathPrefix = '' } = {}) {
  const handler = guarded(restate.createEndpointHandler({ services }), requiredHeader);
  const server = http2.createServer((req, res) => {
    if (pathPrefix && req.url.startsWith(pathPrefix)) req.url = req.url.slice(pathPrefix.length) || '/';
    return handler(req, res);
  });
  server.__sessions = new Set();
  server.on('session', (s) => {
    server.__sessions.add(s);
    s.on('close', () => server.__sessions.delete(s));
  });
  const port = await listen(t, server);
  return `http://127.0.0.1:${port}${pathPrefix}/`;
}

/** SDK services over HTTP/1.1 only; returns the base URI. */
export async function serveH1(t, services, { requiredHeader } = {}) {
  const handler = guarded(restate.createEndpointHandler({ services }), requiredHeader);
  const server = http.createServer(handler);
  const port = await listen(t, server);
  return `http://127.0.0.1:${port}/`;
}

/** A raw HTTP/1.1 server answering /discover with the given status, content-type and body. */
export async function serveRawH1(t, { status = 200, contentType = 'application/vnd.restate.endpointmanifest.v3+json', body }) {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push({ url: req.url, headers: req.headers });
    res.writeHead(status, contentType ? { 'content-type': contentType } : {});
    res.end(typeof body === 'string' ? body : JSON.stringify(body));
  });
  const port = await listen(t, server);
  return { uri: `http://127.0.0.1:${port}/`, seen };
}

/** A raw HTTP/2 cleartext server answering /discover with a given manifest. */
export async function serveRawH2(t, { status = 200, contentType = 'application/vnd.restate.endpointmanifest.v3+json', body }) {
  const seen = [];
  const server = http2.createServer((req, res) => {
    seen.push({ url: req.url, headers: req.headers });
    res.writeHead(status, contentType ? { 'content-type': contentType } : {});
    res.end(typeof body === 'string' ? body : JSON.stringify(body));
  });
  server.__sessions = new Set();
  server.on('session', (s) => {
    server.__sessions.add(s);
    s.on('close', () => server.__sessions.delete(s));
  });
  const port = await listen(t, server);
  return { uri: `http://127.0.0.1:${port}/`, seen };
}

/** A port with nothing listening on it. */
export async function deadPort() {
  const s = http.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

// ---- Sample services ----

export const greeter = restate.service({
  name: 'Greeter',
  handlers: { greet: async (_ctx, name) => `You said hi to ${name}!` },
});

export const greeterV2 = restate.service({
  name: 'Greeter',
  handlers: {
    greet: async (_ctx, name) => `You said hi to ${name}!`,
    farewell: async (_ctx, name) => `Bye ${name}`,
  },
});

export const greeterOtherHandler = restate.service({
  name: 'Greeter',
  handlers: { wave: async () => 'wave' },
});

export const greeterAsObject = restate.object({
  name: 'Greeter',
  handlers: { greet: async () => 'hi' },
});

export const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, n) => n,
    get: restate.handlers.object.shared(async () => 0),
  },
});

export const signup = restate.workflow({
  name: 'Signup',
  handlers: {
    run: async () => 'ok',
    status: async () => 'pending',
  },
});

export const reserved = restate.service({ name: 'restateInternal', handlers: { x: async () => 1 } });

export function manifest(overrides = {}) {
  return {
    minProtocolVersion: 5,
    maxProtocolVersion: 7,
    protocolMode: 'REQUEST_RESPONSE',
    services: [{ name: 'Raw', ty: 'SERVICE', handlers: [{ name: 'go' }] }],
    ...overrides,
  };
}

/** An HTTP/2 endpoint whose served SDK services can be swapped: `use(services)`. */
export async function serveSwitchH2(t, services) {
  let handler = restate.createEndpointHandler({ services });
  const server = http2.createServer((req, res) => handler(req, res));
  server.__sessions = new Set();
  server.on('session', (s) => {
    server.__sessions.add(s);
    s.on('close', () => server.__sessions.delete(s));
  });
  const port = await listen(t, server);
  return {
    uri: `http://127.0.0.1:${port}/`,
    use(next) {
      handler = restate.createEndpointHandler({ services: next });
    },
  };
}
