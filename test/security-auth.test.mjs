// Bearer tokens on the ingress and admin APIs (off by default): without a valid token every
// route answers 401 with KEEL0401 and WWW-Authenticate, /health and /restate/health stay open,
// and the restate CLI (RESTATE_AUTH_TOKEN), the keel CLI (KEEL_AUTH_TOKEN) and the SDK clients
// (headers) work with the token. Tokens come from the config or a file of several lines.
import t from 'tap';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as restate from '@restatedev/restate-sdk';
import * as clients from '@restatedev/restate-sdk-clients';
import { startKeel, serveServices, tempDir } from './helpers/keel.mjs';
import { keelCli } from './helpers/keel-cli.mjs';

const RESTATE_CLI = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', '.bin', 'restate');
const ADMIN_TOKEN = 'admin-0123456789abcdef';
const INGRESS_TOKENS = ['ingress-old-0123456789', 'ingress-new-9876543210'];

const greeter = restate.service({ name: 'Greeter', handlers: { greet: async (_ctx, name) => `hi ${name}` } });

async function setup(t) {
  const dir = tempDir(t);
  const file = path.join(dir, 'ingress.tokens');
  fs.writeFileSync(file, `# rotated on Monday\n${INGRESS_TOKENS[0]}\n\n${INGRESS_TOKENS[1]}\n`);
  return startKeel(t, { dir, env: { KEEL_ADMIN__AUTH_TOKEN: ADMIN_TOKEN, KEEL_INGRESS__AUTH_TOKEN_FILE: file } });
}

async function call(url, { method = 'GET', token, body, headers = {} } = {}) {
  const res = await fetch(url, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, headers: res.headers, text, json };
}

function restateCli(t, admin, env, ...args) {
  const home = tempDir(t, 'keel-cli-home-');
  return new Promise((resolve) => {
    execFile(RESTATE_CLI, args, {
      env: { PATH: process.env.PATH, HOME: home, RESTATE_CLI_CONFIG_HOME: home, RESTATE_ADMIN_URL: admin, NO_COLOR: '1', TERM: 'dumb', ...env },
      timeout: 60_000,
    }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) }));
  });
}

t.test('admin: 401 with KEEL0401 and a challenge without a valid token; health open; every route covered', async (t) => {
  const keel = await setup(t);
  for (const p of ['/health', '/v4/health', '/v2/health']) t.equal((await call(keel.admin + p)).status, 200, `${p} stays open`);
  for (const p of ['/version', '/deployments', '/v4/services', '/metrics', '/nope', '/errors/RT0001']) {
    const none = await call(keel.admin + p);
    t.equal(none.status, 401, `${p} without a token`);
    t.same(none.json, { message: '[KEEL0401] authentication required: send Authorization: Bearer <token>', restate_code: 'KEEL0401' }, p);
    t.equal(none.headers.get('www-authenticate'), 'Bearer realm="keel-admin"');
  }
  const wrong = await call(`${keel.admin}/deployments`, { token: `${ADMIN_TOKEN}x` });
  t.equal(wrong.status, 401);
  t.equal(wrong.json.restate_code, 'KEEL0401');
  t.equal(wrong.headers.get('www-authenticate'), 'Bearer realm="keel-admin", error="invalid_token"');
  t.equal((await call(`${keel.admin}/deployments`, { token: INGRESS_TOKENS[0] })).status, 401, 'an ingress token does not open the admin API');
  t.equal((await call(`${keel.admin}/deployments`, { headers: { authorization: `Basic ${ADMIN_TOKEN}` } })).status, 401, 'only the Bearer scheme');
  const ok = await call(`${keel.admin}/deployments`, { token: ADMIN_TOKEN });
  t.equal(ok.status, 200);
  t.same(ok.json, { deployments: [] });
  t.equal((await call(`${keel.admin}/deployments`, { headers: { authorization: `bearer  ${ADMIN_TOKEN}` } })).status, 200, 'the scheme is case-insensitive');
  t.equal((await call(`${keel.admin}/ui/`)).status, 200, 'the UI app itself is static and open; its API calls need the token');
  const refused = await call(`${keel.admin}/deployments`, { method: 'POST', body: { uri: 'http://127.0.0.1:1/' } });
  t.equal(refused.status, 401, 'nothing runs before the check (no discovery)');
  t.ok(keel.logLines('KEEL0401').length >= 1, 'an invalid token is logged with its code');
});

t.test('ingress: tokens from a file (several lines), /restate/health open, SDK clients with headers', async (t) => {
  const keel = await setup(t);
  const uri = await serveServices(t, [greeter]);
  const reg = await call(`${keel.admin}/deployments`, { method: 'POST', token: ADMIN_TOKEN, body: { uri } });
  t.equal(reg.status, 201, reg.text);

  t.equal((await call(`${keel.ingress}/restate/health`)).status, 200);
  const none = await call(`${keel.ingress}/Greeter/greet`, { method: 'POST', body: 'x' });
  t.equal(none.status, 401);
  t.same(none.json, { code: 401, message: '[KEEL0401] authentication required: send Authorization: Bearer <token>', restate_code: 'KEEL0401' });
  t.equal(none.headers.get('www-authenticate'), 'Bearer realm="keel-ingress"');
  t.equal(none.headers.get('x-restate-error-source'), 'ingress');
  t.equal((await call(`${keel.ingress}/Greeter/greet`, { method: 'POST', body: 'x', token: ADMIN_TOKEN })).status, 401, 'the admin token does not open the ingress');
  for (const token of INGRESS_TOKENS) {
    const r = await call(`${keel.ingress}/Greeter/greet`, { method: 'POST', body: 'you', token });
    t.equal(r.status, 200, `token ${token.slice(0, 11)}`);
    t.same(r.json, 'hi you');
  }
  const rs = clients.connect({ url: keel.ingress, headers: { authorization: `Bearer ${INGRESS_TOKENS[1]}` } });
  t.equal(await rs.serviceClient({ name: 'Greeter' }).greet('sdk client'), 'hi sdk client');
  const anon = clients.connect({ url: keel.ingress });
  await t.rejects(anon.serviceClient({ name: 'Greeter' }).greet('anon'), /401|KEEL0401/);
});

t.test('the restate CLI works with RESTATE_AUTH_TOKEN, the keel CLI with KEEL_AUTH_TOKEN', async (t) => {
  const keel = await setup(t);
  const uri = await serveServices(t, [greeter]);
  const denied = await restateCli(t, keel.admin, {}, 'deployments', 'list');
  t.not(denied.code, 0, 'no token: refused');
  const reg = await restateCli(t, keel.admin, { RESTATE_AUTH_TOKEN: ADMIN_TOKEN }, 'deployments', 'register', uri, '--yes');
  t.equal(reg.code, 0, reg.out);
  t.match(reg.out, /Greeter/);
  const list = await restateCli(t, keel.admin, { RESTATE_AUTH_TOKEN: ADMIN_TOKEN }, 'services', 'list');
  t.equal(list.code, 0, list.out);
  t.match(list.out, /Greeter/);

  const k = await keelCli(['services', 'ls', '--json'], { admin: keel.admin, env: { KEEL_AUTH_TOKEN: ADMIN_TOKEN } });
  t.equal(k.code, 0, k.err);
  t.match(JSON.stringify(k.json), /Greeter/);
  const kd = await keelCli(['services', 'ls', '--json'], { admin: keel.admin });
  t.equal(kd.code, 1, 'the keel CLI without a token: the server refused');
  t.match(kd.err, /KEEL0401/);
});

t.test('off by default; an unreadable or empty token file refuses startup with RT0002', async (t) => {
  const open = await startKeel(t);
  t.equal((await call(`${open.admin}/deployments`)).status, 200, 'no tokens configured: open, as Restate');
  const dir = tempDir(t);
  const empty = path.join(dir, 'empty');
  fs.writeFileSync(empty, '# nothing\n\n');
  for (const [env, why] of [
    [{ KEEL_ADMIN__AUTH_TOKEN_FILE: path.join(dir, 'missing') }, /admin\.auth_token_file.*cannot read/],
    [{ KEEL_INGRESS__AUTH_TOKEN_FILE: empty }, /ingress\.auth_token_file.*holds no token/],
    [{ KEEL_ADMIN__AUTH_TOKEN: 'has space' }, /visible ASCII/],
  ]) {
    const err = await startKeel(t, { env }).then(() => undefined, (e) => e);
    t.ok(err, `${JSON.stringify(env)} refuses to start`);
    t.match(err?.message, /RT0002/);
    t.match(err?.message, why);
  }
});
