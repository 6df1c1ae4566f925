// META codes against a real Keel process: meta storage that cannot be used makes the server
// refuse to start with the code and the way out (META0005, META0010, META0011); wrong
// additional_headers credentials answered 403 are META0003 on the admin API; after a refused
// registration Keel keeps serving.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import http2 from 'node:http2';
import * as restate from '@restatedev/restate-sdk';
import { ClassicLevel } from 'classic-level';
import { startKeel, serveServices, register, ingress, tempDir } from './helpers/keel.mjs';

async function startFails(t, dir) {
  const err = await startKeel(t, { dir }).then(
    () => undefined,
    (e) => e,
  );
  t.ok(err, 'Keel refused to start');
  return err?.message ?? '';
}

t.test('META0011: a non-empty meta directory without a version file', async (t) => {
  const dir = tempDir(t);
  fs.mkdirSync(path.join(dir, 'data', 'meta'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'data', 'meta', 'stray.bin'), 'x');
  const out = await startFails(t, dir);
  t.match(out, /META0011/);
  t.match(out, /wipe it or set another meta\.storage_path/);
});

t.test('META0010: meta storage written by an incompatible version', async (t) => {
  const dir = tempDir(t);
  fs.mkdirSync(path.join(dir, 'data', 'meta'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'data', 'meta', 'KEEL_META_FORMAT_VERSION'), '99\n');
  const out = await startFails(t, dir);
  t.match(out, /META0010/);
});

t.test('META0005: corrupted meta storage at startup; registrations made before survive otherwise', async (t) => {
  const dir = tempDir(t);
  const keel = await startKeel(t, { dir });
  const svc = restate.service({ name: 'Kept', handlers: { hi: async () => 'hi' } });
  await register(keel, await serveServices(t, [svc]));
  await keel.stop();
  // Corrupt the last metadata record in place.
  const db = new ClassicLevel(path.join(dir, 'data', 'meta', 'log'), { keyEncoding: 'utf8', valueEncoding: 'utf8' });
  const keys = await db.keys().all();
  t.ok(keys.length >= 1);
  await db.put(keys[keys.length - 1], '{"kind":"deployment_added","deployment":');
  await db.close();
  const out = await startFails(t, dir);
  t.match(out, /META0005/);
  t.match(out, /wipe meta\.storage_path and register the deployments again/);
});

t.test('META0003: additional_headers with wrong credentials (403) through the admin API; Keel keeps serving', async (t) => {
  const keel = await startKeel(t);
  const svc = restate.service({ name: 'Guarded', handlers: { hi: async () => 'hi' } });
  const inner = restate.createEndpointHandler({ services: [svc] });
  const server = http2.createServer((req, res) => {
    if (req.headers['x-api-key'] !== 'right') {
      res.writeHead(req.headers['x-api-key'] ? 403 : 401, { 'content-type': 'text/plain' });
      res.end('forbidden');
      return;
    }
    inner(req, res);
  });
  const sessions = new Set();
  server.on('session', (s) => (sessions.add(s), s.on('close', () => sessions.delete(s))));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => { for (const s of sessions) s.destroy(); server.close(() => r()); }));
  const uri = `http://127.0.0.1:${server.address().port}/`;
  for (const [headers, status] of [[undefined, 401], [{ 'x-api-key': 'wrong' }, 403]]) {
    const res = await fetch(`${keel.admin}/deployments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ uri, ...(headers ? { additional_headers: headers } : {}) }),
    });
    const body = await res.json();
    t.equal(res.status, 502);
    t.equal(body.restate_code, 'META0003');
    t.match(body.message, new RegExp(`status ${status}`));
  }
  t.match(keel.logs(), /META0003/);
  await register(keel, uri, { additional_headers: { 'x-api-key': 'right' } });
  t.equal((await ingress(keel, '/Guarded/hi', null)).body, 'hi');
});
