import t from 'tap';
import { newDeploymentId } from '../dist/common/ids.js';

const unknownId = newDeploymentId();
import pino from 'pino';
import { Writable } from 'node:stream';
import { Registry } from '../dist/metadata/registry.js';
import { createAdminServer } from '../dist/admin/server.js';
import { emptySource } from '../dist/admin/introspection.js';
import { silentLogger } from '../dist/common/logger.js';
import {
  tempDir, testConfig, serveH2, serveH1, serveSwitchH2, deadPort,
  greeter, greeterV2, greeterAsObject, greeterOtherHandler, counter, signup,
} from './services/meta-helpers.mjs';

async function startAdmin(t) {
  const lines = [];
  const sink = new Writable({ write(chunk, _enc, cb) { lines.push(JSON.parse(chunk.toString())); cb(); } });
  const logger = pino({ level: 'info' }, sink);
  const config = testConfig(tempDir(t));
  const registry = await Registry.open(config, silentLogger);
  const app = await createAdminServer({ config, registry, logger });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const base = `http://127.0.0.1:${app.server.address().port}`;
  t.teardown(async () => { await app.close(); await registry.close(); });
  const call = async (method, path, body, headers = {}) => {
    const res = await fetch(base + path, {
      method,
      headers: body !== undefined ? { 'content-type': 'application/json', ...headers } : headers,
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try { json = text ? JSON.parse(text) : undefined; } catch { json = undefined; }
    return { status: res.status, headers: res.headers, text, json };
  };
  return { call, base, lines, registry };
}

function cliBody(uri, extra = {}) {
  return { uri, additional_headers: null, use_http_11: false, breaking: false, force: false, dry_run: false, ...extra };
}

t.test('version, health, api version prefixes', async (t) => {
  const { call } = await startAdmin(t);
  for (const p of ['/version', '/v4/version', '/v2/version']) {
    const r = await call('GET', p);
    t.equal(r.status, 200);
    t.same(r.json, { version: '1.7.12', min_admin_api_version: 2, max_admin_api_version: 4, ingress_endpoint: 'http://127.0.0.1:18080/', features: { vqueues: true } });
  }
  for (const p of ['/health', '/v4/health']) {
    const r = await call('GET', p);
    t.equal(r.status, 200);
    t.equal(r.text, '');
  }
  const v1 = await call('GET', '/v1/deployments');
  t.equal(v1.status, 400);
  t.same(v1.json, { message: 'Unsupported Admin API version V1. This server supports versions between V2 and V4.', restate_code: 'KEEL0006' });
  const nope = await call('GET', '/v4/nope');
  t.equal(nope.status, 404);
  t.same(Object.keys(nope.json).sort(), ['message', 'restate_code']);
  t.equal(nope.json.restate_code, 'KEEL0004');
});

t.test('register, list, describe, services, handlers', async (t) => {
  const { call } = await startAdmin(t);
  const uri = await serveH2(t, [greeter, counter, signup]);
  const dry = await call('POST', '/v4/deployments', cliBody(uri, { dry_run: true }));
  t.equal(dry.status, 201);
  t.equal((await call('GET', '/v4/deployments')).json.deployments.length, 0, 'dry run persisted nothing');

  const r = await call('POST', '/v4/deployments', cliBody(uri.replace(/\/$/, '')));
  t.equal(r.status, 201);
  const id = r.json.id;
  t.match(id, /^dp_1[0-9a-zA-Z]{22}$/);
  t.not(id, dry.json.id);
  t.equal(r.headers.get('location'), `deployments/${id}`);
  t.equal(r.json.min_protocol_version, 5);
  t.match(r.json.sdk_version, /restate-sdk-typescript/);
  const counterSvc = r.json.services.find((s) => s.name === 'Counter');
  t.match(counterSvc, {
    name: 'Counter', ty: 'VirtualObject', deployment_id: id, revision: 1, public: true,
    idempotency_retention: '1d', journal_retention: '1d', inactivity_timeout: '1m', abort_timeout: '10m',
    enable_lazy_state: false,
    retry_policy: { initial_interval: '500ms', exponentiation_factor: 2, max_attempts: 70, max_interval: '1m', on_max_attempts: 'Pause' },
  });
  t.match(counterSvc.handlers.find((h) => h.name === 'add'), { name: 'add', ty: 'Exclusive', public: true, input_description: 'application/json', output_description: 'application/json' });
  const wf = r.json.services.find((s) => s.name === 'Signup');
  t.equal(wf.ty, 'Workflow');
  t.equal(wf.workflow_completion_retention, '1d');
  t.equal(r.json.services.find((s) => s.name === 'Greeter').handlers[0].ty, undefined);

  const again = await call('POST', '/v4/deployments', cliBody(uri));
  t.equal(again.status, 200);
  t.equal(again.json.id, id);

  const h1 = await serveH1(t, [greeterV2]);
  const r2 = await call('POST', '/deployments', cliBody(h1, { use_http_11: true, additional_headers: { 'x-k': 'v' } }));
  t.equal(r2.status, 201);
  t.equal(r2.json.services[0].revision, 2);

  const list = await call('GET', '/v4/deployments');
  t.equal(list.status, 200);
  const byId = Object.fromEntries(list.json.deployments.map((d) => [d.id, d]));
  t.match(byId[id], { id, uri, protocol_type: 'BidiStream', http_version: 'HTTP/2.0', min_protocol_version: 5, max_protocol_version: 7 });
  t.match(byId[id].created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
  t.same(byId[id].services.map((s) => [s.name, s.revision]).sort(), [['Counter', 1], ['Greeter', 1], ['Signup', 1]]);
  t.equal(byId[id].additional_headers, undefined);
  t.match(byId[r2.json.id], { protocol_type: 'RequestResponse', http_version: 'HTTP/1.1', additional_headers: { 'x-k': 'v' } });

  const detail = await call('GET', `/v4/deployments/${id}`);
  t.equal(detail.status, 200);
  t.equal(detail.json.id, id);
  t.equal(detail.json.services.find((s) => s.name === 'Greeter').revision, 1);
  t.ok(Array.isArray(detail.json.services[0].handlers));

  const svcs = await call('GET', '/v4/services');
  t.same(svcs.json.services.map((s) => [s.name, s.revision]), [['Counter', 1], ['Greeter', 2], ['Signup', 1]]);
  const g = await call('GET', '/v4/services/Greeter');
  t.equal(g.json.deployment_id, r2.json.id);
  const hs = await call('GET', '/v4/services/Greeter/handlers');
  t.same(hs.json.handlers.map((h) => h.name).sort(), ['farewell', 'greet']);
  const one = await call('GET', '/v4/services/Counter/handlers/get');
  t.match(one.json, { name: 'get', ty: 'Shared' });
  const noH = await call('GET', '/v4/services/Counter/handlers/nope');
  t.equal(noH.status, 404);
});

t.test('error bodies and statuses', async (t) => {
  const { call, lines } = await startAdmin(t);
  const port = await deadPort();
  const dead = await call('POST', '/v4/deployments', cliBody(`http://127.0.0.1:${port}/`));
  t.equal(dead.status, 502);
  t.equal(dead.json.restate_code, 'META0003');
  t.match(dead.json.message, new RegExp(`^\\[META0003\\] .*127\\.0\\.0\\.1:${port}`));
  const warn = lines.find((l) => l.code === 'META0003');
  t.ok(warn, 'registration error logged with its code');
  t.equal(warn.level, 40, 'at warn');

  const h1only = await serveH1(t, [greeter]);
  const e14 = await call('POST', '/v4/deployments', cliBody(h1only));
  t.equal(e14.json.restate_code, 'META0014');
  t.equal(e14.status, 502, "the endpoint's answer is the problem: a bad gateway, not a fault of Keel");
  t.match(e14.json.message, /use-http1\.1/);

  const ep = await serveSwitchH2(t, [greeter]);
  t.equal((await call('POST', '/v4/deployments', cliBody(ep.uri))).status, 201);
  ep.use([greeterV2]);
  const e4 = await call('POST', '/v4/deployments', cliBody(ep.uri));
  t.equal(e4.status, 409);
  t.equal(e4.json.restate_code, 'META0004');
  const forced = await call('POST', '/v4/deployments', cliBody(ep.uri, { force: true }));
  t.equal(forced.status, 200);

  const e6 = await call('POST', '/v4/deployments', cliBody(await serveH2(t, [greeterAsObject])));
  t.equal(e6.status, 409);
  t.equal(e6.json.restate_code, 'META0006');

  const bad = await call('POST', '/v4/deployments', '{"uri": ');
  t.equal(bad.status, 400);
  t.equal(bad.json.restate_code, 'KEEL0001');
  t.match(bad.json.message, /JSON/);
  const arr = await call('POST', '/v4/deployments', '[1,2]');
  t.equal(arr.status, 400);
  t.equal(arr.json.restate_code, 'KEEL0001');
  const missing = await call('POST', '/v4/deployments', { force: true });
  t.equal(missing.status, 400);
  t.match(missing.json.message, /uri/);
  t.equal(missing.json.restate_code, 'KEEL0007');
  const badType = await call('POST', '/v4/deployments', { uri: ep.uri, force: 'yes' });
  t.equal(badType.status, 400);
  t.same([badType.json.restate_code, /force/.test(badType.json.message)], ['KEEL0002', true], 'the field is named');
  const badUri = await call('POST', '/v4/deployments', { uri: 'not a uri' });
  t.equal(badUri.status, 400);
  t.equal(badUri.json.restate_code, 'KEEL0007');

  const malformed = await call('GET', '/v4/deployments/dp_doesnotexist');
  t.equal(malformed.status, 400);
  t.equal(malformed.json.restate_code, 'KEEL0003');
  const unknown = await call('GET', `/v4/deployments/${unknownId}`);
  t.equal(unknown.status, 404);
  t.same(unknown.json, { message: `[KEEL0004] The requested deployment '${unknownId}' does not exist`, restate_code: 'KEEL0004' });
  const noSvc = await call('GET', '/v4/services/NoSuch');
  t.equal(noSvc.status, 404);
  t.same(noSvc.json, { message: "[KEEL0004] The requested service 'NoSuch' does not exist", restate_code: 'KEEL0004' });

  const code = await call('GET', '/v4/errors/META0004');
  t.equal(code.status, 200);
  t.equal(code.json.code, 'META0004');
  t.ok(code.json.remedy);
  t.equal((await call('GET', '/errors/meta0017')).json.code, 'META0017');
  // The catalogue's status is the one its refusals answer with (META0016 and META0017 are answered 409 below).
  t.same([(await call('GET', '/errors/META0016')).json.status, (await call('GET', '/errors/META0017')).json.status], [409, 409], 'the catalogue says 409 where the refusal answers 409');
  t.equal((await call('GET', '/v4/errors/NOPE0001')).status, 404);
});

t.test('update in place (PUT, PATCH), delete, META0016, META0017', async (t) => {
  const { call } = await startAdmin(t);
  const a = await serveSwitchH2(t, [greeter, counter]);
  const b = await serveSwitchH2(t, [counter]);
  const ida = (await call('POST', '/v4/deployments', cliBody(a.uri))).json.id;
  const idb = (await call('POST', '/v4/deployments', cliBody(b.uri))).json.id;

  a.use([greeterOtherHandler, counter]);
  const e16 = await call('PUT', `/deployments/${ida}`, {});
  t.equal(e16.status, 409);
  t.equal(e16.json.restate_code, 'META0016');

  a.use([greeterV2, counter]);
  const ok = await call('PUT', `/v4/deployments/${ida}`, {});
  t.equal(ok.status, 200);
  t.equal(ok.json.id, ida);
  t.equal(ok.json.services.find((s) => s.name === 'Greeter').handlers.length, 2);

  b.use([greeterV2, counter]);
  const e16b = await call('PATCH', `/v4/deployments/${idb}`, { uri: a.uri });
  t.equal(e16b.status, 200, 'b gains Greeter, keeps Counter: allowed');
  const detail = await call('GET', `/v4/deployments/${idb}`);
  t.equal(detail.json.uri, a.uri);

  a.use([counter]);
  const e17 = await call('POST', '/v4/deployments', cliBody(a.uri, { force: true }));
  t.equal(e17.status, 409);
  t.equal(e17.json.restate_code, 'META0017');

  const noForce = await call('DELETE', `/v4/deployments/${idb}`);
  t.equal(noForce.status, 409, 'a deployment that serves the latest revision stays without force');
  t.equal(noForce.json.restate_code, 'KEEL0016');
  t.match(noForce.json.message, /latest revision of Counter, Greeter|latest revision of Greeter, Counter/);
  t.equal((await call('DELETE', `/v4/deployments/${idb}?force=yes`)).json.restate_code, 'KEEL0002', 'force is true or false');
  const del = await call('DELETE', `/v4/deployments/${idb}?force=true`);
  t.equal(del.status, 202);
  t.equal(del.text, '');
  t.equal((await call('DELETE', `/v4/deployments/${idb}?force=true`)).status, 404);
  t.equal((await call('GET', `/v4/deployments/${idb}`)).status, 404);
  const forced = await call('POST', '/v4/deployments', cliBody(a.uri, { force: true }));
  t.equal(forced.status, 200);
  t.equal(forced.json.id, ida);
  t.equal((await call('PATCH', `/v4/deployments/${unknownId}`, {})).status, 404);
});

t.test('delete without force: a drained deployment goes, one in use stays with KEEL0016', async (t) => {
  const { call, registry } = await startAdmin(t);
  const a = await serveH2(t, [greeter]);
  const b = await serveH2(t, [greeterV2]);
  const ida = (await call('POST', '/v4/deployments', cliBody(a))).json.id;
  const idb = (await call('POST', '/v4/deployments', cliBody(b))).json.id;
  t.equal(registry.service('Greeter').deployment_id, idb, 'b holds the latest revision');
  const busy = await call('DELETE', `/v4/deployments/${idb}`);
  t.equal(busy.status, 409);
  t.equal(busy.json.restate_code, 'KEEL0016');
  t.match(busy.json.message, /latest revision of Greeter/);
  const drained = await call('DELETE', `/v4/deployments/${ida}`);
  t.equal(drained.status, 202, 'a superseded deployment with no invocations is removed');
  t.equal((await call('GET', `/v4/deployments/${ida}`)).status, 404);
});

t.test('delete without force: invocations still pinned keep a superseded deployment', async (t) => {
  const config = testConfig(tempDir(t));
  const registry = await Registry.open(config, silentLogger);
  let pinnedTo;
  const introspection = {
    invocationLines: async function* () {}, watchInvocations: () => () => {}, journalEntries: async () => [],
    // inv_1 (suspended) is pinned to the deployment; a completed one would not count
    unfinishedPinnedTo: async (id) => (id === pinnedTo ? 1 : 0),
    state: async function* () {}, inbox: () => [], locks: async function* () {}, promises: async function* () {},
    manage: emptySource.manage,
  };
  const app = await createAdminServer({ config, registry, logger: silentLogger, introspection });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => { await app.close(); await registry.close(); });
  const base = `http://127.0.0.1:${app.server.address().port}`;
  const post = (uri) => fetch(`${base}/deployments`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ uri }) }).then((r) => r.json());
  pinnedTo = (await post(await serveH2(t, [greeter]))).id;
  await post(await serveH2(t, [greeterV2]));
  const res = await fetch(`${base}/deployments/${pinnedTo}`, { method: 'DELETE' });
  const body = await res.json();
  t.equal(res.status, 409);
  t.equal(body.restate_code, 'KEEL0016');
  t.match(body.message, /^\[KEEL0016\] 1 invocation\(s\) that are not completed are pinned/);
  t.equal((await fetch(`${base}/deployments/${pinnedTo}?force=true`, { method: 'DELETE' })).status, 202, 'force still removes it');
});
