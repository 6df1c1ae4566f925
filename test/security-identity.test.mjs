// Request identity v1: with worker.invoker.request_identity_private_key_pem_file, Keel signs
// every request to endpoints (discovery and invocations) as Restate does, and real SDK
// endpoints that demand signatures (identityKeys) accept them; a wrong or missing key is
// refused with META0003 at registration and RT0006 on attempts. A bad key file stops startup.
import t from 'tap';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as restate from '@restatedev/restate-sdk';
import { RequestSigner, base58 } from '../dist/endpoint/identity.js';
import { startKeel, serveServices, register, ingress, query, eventually, tempDir, freePort } from './helpers/keel.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const KEY_FILE_ENV = 'KEEL_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE';

/** A fresh ed25519 key as a PKCS#8 PEM file, and its publickeyv1_ name. */
function newKey(dir, name = 'identity.pem') {
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ed25519');
  const file = path.join(dir, name);
  fs.writeFileSync(file, privateKey.export({ format: 'pem', type: 'pkcs8' }));
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x, 'base64url');
  return { file, kid: `publickeyv1_${base58(raw)}`, pem: fs.readFileSync(file, 'utf8'), publicKey };
}

function decodeJwt(jwt) {
  const [h, c, s] = jwt.split('.');
  return { header: JSON.parse(Buffer.from(h, 'base64url')), claims: JSON.parse(Buffer.from(c, 'base64url')), input: `${h}.${c}`, signature: Buffer.from(s, 'base64url') };
}

const greeter = restate.service({ name: 'Greeter', handlers: { greet: async (_ctx, name) => `hi ${name}` } });
const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, n) => {
      const v = ((await ctx.get('n')) ?? 0) + n;
      ctx.set('n', v);
      return v;
    },
  },
});

/** Runs Keel expecting it to refuse to start; resolves its output once it exited. */
async function startFails(t, env) {
  const dir = tempDir(t);
  const [ingressPort, adminPort] = [await freePort(), await freePort()];
  const proc = spawn(process.execPath, [path.join(root, 'dist/main.js')], {
    cwd: dir,
    env: {
      PATH: process.env.PATH,
      KEEL_BASE_DIR: path.join(dir, 'data'),
      KEEL_INGRESS__BIND_ADDRESS: `127.0.0.1:${ingressPort}`,
      KEEL_ADMIN__BIND_ADDRESS: `127.0.0.1:${adminPort}`,
      KEEL_LOG__FORMAT: 'json',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000);
  const code = await new Promise((resolve) => proc.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  return { code, out };
}

t.test('the public key of a known private key is the one Restate derives', async (t) => {
  const dir = tempDir(t);
  // The test vector of restatedev/restate crates/service-client (request_identity/v1.rs).
  const file = path.join(dir, 'restate.pem');
  fs.writeFileSync(file, '-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIPe++4ZTPQDF81otpoU/mOGHC2vOAVp9WbiCblvn3nXO\n-----END PRIVATE KEY-----\n');
  t.equal(RequestSigner.fromPemFile(file, 60_000).publicKey, 'publickeyv1_AfQwmwfgEZhrWpvv8N52SHpRtZqGGaFr4AZN6qtYWSiY');
  t.equal(base58(Buffer.from([0, 0, 1])), '112', 'leading zero bytes are 1s');
});

t.test('tokens: EdDSA over aud = path, nbf/iat/exp ± expiration; one per path, reused for half its validity', async (t) => {
  const key = newKey(tempDir(t));
  const signer = RequestSigner.fromPemFile(key.file, 60_000);
  const now = 1_900_000_000_000;
  const h = signer.headers('/invoke/Counter/add', now);
  t.equal(h['x-restate-signature-scheme'], 'v1');
  const jwt = decodeJwt(h['x-restate-jwt-v1']);
  t.same(jwt.header, { typ: 'JWT', alg: 'EdDSA', kid: key.kid });
  t.same(jwt.claims, { aud: '/invoke/Counter/add', exp: 1_900_000_060, iat: 1_900_000_000, nbf: 1_899_999_940 });
  t.ok(crypto.verify(null, Buffer.from(jwt.input), key.publicKey, jwt.signature), 'the signature verifies with the public key');

  t.equal(signer.headers('/invoke/Counter/add', now + 29_000)['x-restate-jwt-v1'], h['x-restate-jwt-v1'], 'cached within half the validity');
  const renewed = signer.headers('/invoke/Counter/add', now + 30_000)['x-restate-jwt-v1'];
  t.not(renewed, h['x-restate-jwt-v1'], 'signed again after half the validity');
  t.equal(decodeJwt(renewed).claims.iat, 1_900_000_030);
  t.equal(decodeJwt(signer.headers('/discover', now)['x-restate-jwt-v1']).claims.aud, '/discover', 'one token per path');

  const short = RequestSigner.fromPemFile(key.file, 5_000).headers('/discover', now)['x-restate-jwt-v1'];
  const c = decodeJwt(short).claims;
  t.same([c.exp - c.iat, c.iat - c.nbf], [5, 5], 'request_identity_expiration sets the window');
});

t.test('signed discovery and invocations reach SDK endpoints that demand them (HTTP/2 and HTTP/1.1)', async (t) => {
  const dir = tempDir(t);
  const key = newKey(dir);
  const keel = await startKeel(t, { dir, env: { [KEY_FILE_ENV]: key.file } });
  t.match(keel.logs(), key.kid, 'the public key is logged at startup');
  const loaded = keel.output.split('\n').filter((l) => l.includes(key.kid)).map((l) => JSON.parse(l))[0];
  t.equal(loaded.kid, key.kid);
  t.equal(loaded.level, 30, 'at info');

  const h2 = await serveServices(t, [greeter, counter], { identityKeys: [key.kid] });
  await register(keel, h2);
  t.same((await ingress(keel, '/Greeter/greet', 'signed')).body, 'hi signed');
  t.same((await ingress(keel, '/Counter/c1/add', 2)).body, 2);
  t.same((await ingress(keel, '/Counter/c2/add', 3)).body, 3, 'another key, the same path: the cached token');

  const other = restate.service({ name: 'Other', handlers: { ping: async () => 'pong' } });
  const h1 = await serveServices(t, [other], { http1: true, identityKeys: [key.kid] });
  await register(keel, h1, { use_http_11: true });
  t.same((await ingress(keel, '/Other/ping', null)).body, 'pong');
});

t.test('an endpoint that demands another key: META0003 at registration; unsigned Keel too', async (t) => {
  const dir = tempDir(t);
  const key = newKey(dir);
  const stranger = newKey(dir, 'stranger.pem');
  const keel = await startKeel(t, { dir, env: { [KEY_FILE_ENV]: key.file } });
  const uri = await serveServices(t, [greeter], { identityKeys: [stranger.kid] });
  const res0 = await fetch(`${keel.admin}/deployments`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ uri }) });
  const body = await res0.json();
  t.equal(res0.status, 502, JSON.stringify(body));
  t.equal(body.restate_code, 'META0003');
  t.match(body.message, /status 401/);
  t.match(body.message, /publickeyv1_/, 'the message says what to check');
  t.same((await (await fetch(`${keel.admin}/deployments`)).json()).deployments, [], 'nothing registered');
  const unsigned = await startKeel(t);
  const res = await fetch(`${unsigned.admin}/deployments`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ uri }) });
  t.equal(res.status, 502);
  t.equal((await res.json()).restate_code, 'META0003');
});

t.test('attempts refused by the endpoint (the key changed) fail with RT0006 and retry; the right key completes them', async (t) => {
  const dir = tempDir(t);
  const key = newKey(dir);
  const keel = await startKeel(t, { dir, env: { [KEY_FILE_ENV]: key.file } });
  const uri = await serveServices(t, [greeter], { identityKeys: [key.kid] });
  await register(keel, uri);
  t.same((await ingress(keel, '/Greeter/greet', 'before')).body, 'hi before');

  const rightPem = key.pem;
  fs.writeFileSync(key.file, newKey(tempDir(t)).pem);
  await keel.restart();
  const sent = await ingress(keel, '/Greeter/greet/send', 'after');
  t.equal(sent.status, 202);
  const id = sent.body.invocationId;
  const row = await eventually(async () => {
    const [r] = await query(keel, `SELECT status, last_failure_error_code, last_failure FROM sys_invocation WHERE id = '${id}'`);
    return r?.last_failure_error_code ? r : undefined;
  });
  t.equal(row.last_failure_error_code, 'RT0006');
  t.match(row.last_failure, /401 Unauthorized/);
  t.match(row.last_failure, /request_identity_private_key_pem_file/);
  t.ok(await eventually(() => keel.logLines('RT0006', id).length > 0), 'logged with its code');

  fs.writeFileSync(key.file, rightPem);
  await keel.restart();
  const done = await fetch(`${keel.ingress}/restate/invocation/${id}/attach`);
  t.equal(done.status, 200);
  t.same(await done.json(), 'hi after');
});

t.test('a bad key file refuses startup with RT0002', async (t) => {
  const dir = tempDir(t);
  const ec = path.join(dir, 'ec.pem');
  fs.writeFileSync(ec, crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'pem', type: 'pkcs8' }));
  const garbage = path.join(dir, 'garbage.pem');
  fs.writeFileSync(garbage, '-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n');
  const two = path.join(dir, 'two.pem');
  fs.writeFileSync(two, newKey(dir, 'a.pem').pem + newKey(dir, 'b.pem').pem);
  const cases = [
    [path.join(dir, 'missing.pem'), /cannot read/],
    [ec, /ed25519 key is required/],
    [garbage, /not a PEM private key/],
    [two, /exactly one PEM private key/],
  ];
  for (const [file, why] of cases) {
    const { code, out } = await startFails(t, { [KEY_FILE_ENV]: file });
    t.not(code, 0, file);
    const fatal = out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)).find((l) => l.code === 'RT0002');
    t.ok(fatal, `RT0002 for ${path.basename(file)}`);
    t.match(fatal?.msg, /request_identity_private_key_pem_file/);
    t.match(fatal?.msg, why);
    t.notMatch(out, /keel is ready/);
  }
});
