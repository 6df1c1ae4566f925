import t from 'tap';
import { newDeploymentId } from '../dist/common/ids.js';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Registry } from '../dist/metadata/registry.js';
import { createAdminServer } from '../dist/admin/server.js';
import { silentLogger } from '../dist/common/logger.js';
import {
  tempDir, testConfig, serveH2, serveH1, serveSwitchH2, deadPort, greeter, greeterV2, greeterAsObject, counter, signup,
} from './services/meta-helpers.mjs';
import { resolveTarget } from '../dist/metadata/targets.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLI = path.join(here, '..', 'node_modules', '.bin', 'restate');

async function startAdmin(t) {
  const config = testConfig(tempDir(t));
  const registry = await Registry.open(config, silentLogger);
  const app = await createAdminServer({ config, registry, logger: silentLogger });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => { await app.close(); await registry.close(); });
  const adminUrl = `http://127.0.0.1:${app.server.address().port}`;
  const home = tempDir(t, 'keel-cli-home-');
  // Async on purpose: the admin server runs in this process.
  const cli = (...args) => new Promise((resolve) => {
    execFile(CLI, args, {
      env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: adminUrl, RESTATE_CLI_CONFIG_HOME: home, NO_COLOR: '1', TERM: 'dumb' },
      timeout: 60_000,
    }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout: String(stdout), stderr: String(stderr), out: String(stdout) + String(stderr) });
    });
  });
  return { cli, registry, adminUrl };
}

t.test('restate CLI: register (HTTP/2 and --use-http1.1), list, describe, svc ls', async (t) => {
  const { cli, registry } = await startAdmin(t);
  const uri = await serveH2(t, [greeter, counter]);

  const reg = await cli('deployments', 'register', uri, '--yes');
  t.equal(reg.code, 0, reg.out);
  t.match(reg.out, /Greeter/);
  t.match(reg.out, /Counter/);
  t.equal(registry.deployments().length, 1);
  const id = registry.deployments()[0].id;
  t.match(reg.out, id);

  const again = await cli('deployments', 'register', uri, '--yes');
  t.equal(again.code, 0, again.out);
  t.match(again.out, /already exists/);
  t.equal(registry.deployments().length, 1);

  const h1 = await serveH1(t, [greeterV2]);
  const noFlag = await cli('deployments', 'register', h1, '--yes');
  t.not(noFlag.code, 0);
  t.match(noFlag.out, /META0014/);
  const reg2 = await cli('deployments', 'register', h1, '--use-http1.1', '--yes');
  t.equal(reg2.code, 0, reg2.out);
  t.equal(registry.service('Greeter').revision, 2);
  const id2 = registry.service('Greeter').deployment_id;
  t.equal(registry.deployment(id2).use_http_11, true);

  const list = await cli('deployments', 'list');
  t.equal(list.code, 0, list.out);
  t.match(list.out, id);
  t.match(list.out, id2);
  t.match(list.out, /Greeter/);
  t.match(list.out, /Counter/);

  const svc = await cli('svc', 'ls');
  t.equal(svc.code, 0, svc.out);
  t.match(svc.out, /Greeter/);
  t.match(svc.out, /Counter/);
  t.match(svc.out, /virtual object/i);

  const svc2 = await cli('services', 'list');
  t.equal(svc2.code, 0, svc2.out);
  t.match(svc2.out, /Greeter/);

  const desc = await cli('deployments', 'describe', id);
  t.equal(desc.code, 0, desc.out);
  t.match(desc.out, /Counter/);
  t.match(desc.out, uri.replace(/\/$/, ''));

  // Counter lives in one deployment only, so describe needs no SQL (/query is not served here).
  const svcDesc = await cli('services', 'describe', 'Counter');
  t.equal(svcDesc.code, 0, svcDesc.out);
  t.match(svcDesc.out, /add/);
  t.match(svcDesc.out, /get/);
  t.match(svcDesc.out, id);
});

t.test('restate CLI: --force re-registration of changed code at the same URI', async (t) => {
  const { cli, registry } = await startAdmin(t);
  const ep = await serveSwitchH2(t, [greeter]);
  const first = await cli('deployments', 'register', ep.uri, '--yes');
  t.equal(first.code, 0, first.out);
  const id = registry.deployments()[0].id;
  ep.use([greeterV2]);
  const conflict = await cli('deployments', 'register', ep.uri, '--yes');
  t.equal(conflict.code, 1);
  t.match(conflict.out, /META0004/);
  const forced = await cli('deployments', 'register', ep.uri, '--force', '--yes');
  t.equal(forced.code, 0, forced.out);
  t.match(forced.out, id);
  t.equal(registry.deployments().length, 1);
  t.equal(registry.service('Greeter').revision, 2);
  t.same(registry.service('Greeter').handlers.map((h) => h.name).sort(), ['farewell', 'greet']);
});

t.test('restate CLI: errors are rendered with their codes', async (t) => {
  const { cli, registry } = await startAdmin(t);
  const port = await deadPort();
  const dead = await cli('deployments', 'register', `http://127.0.0.1:${port}/`, '--yes');
  t.equal(dead.code, 1);
  t.match(dead.out, /META0003/);
  t.match(dead.out, /502/);

  await cli('deployments', 'register', await serveH2(t, [greeter]), '--yes');
  t.equal(registry.deployments().length, 1);
  const breaking = await cli('deployments', 'register', await serveH2(t, [greeterAsObject]), '--yes');
  t.equal(breaking.code, 1);
  t.match(breaking.out, /META0006|Breaking/);
  t.equal(registry.deployments().length, 1);

  const unknownId = newDeploymentId();
  const unknown = await cli('deployments', 'describe', unknownId);
  t.not(unknown.code, 0);
  t.match(unknown.out, `The requested deployment '${unknownId}' does not exist`);
  t.match(unknown.out, /404/);
  const malformed = await cli('deployments', 'describe', 'dp_doesnotexist');
  t.not(malformed.code, 0);
  t.match(malformed.out, /400/);
});

t.test('restate CLI: services config view and patch (PATCH /services/{name}); a new deployment resets the options', async (t) => {
  const { cli, registry, adminUrl } = await startAdmin(t);
  const config = testConfig(tempDir(t));
  t.equal((await cli('deployments', 'register', await serveH2(t, [greeter, signup]), '--yes')).code, 0);
  const patch = await cli('services', 'config', 'patch', 'Greeter', '--public', 'false', '--idempotency-retention', '2d', '--journal-retention', '1h 30m', '--inactivity-timeout', '45s', '--abort-timeout', '2m', '--yes');
  t.equal(patch.code, 0, patch.out);
  const s = registry.service('Greeter');
  t.same(
    { public: s.public, idem: s.idempotency_retention_ms, journal: s.journal_retention_ms, inactivity: s.inactivity_timeout_ms, abort: s.abort_timeout_ms, revision: s.revision },
    { public: false, idem: 2 * 86_400_000, journal: 5_400_000, inactivity: 45_000, abort: 120_000, revision: 1 },
    'the latest revision changed in place',
  );
  const greet = s.handlers.find((h) => h.name === 'greet');
  const resolved = resolveTarget(config, s, greet, '', 'idem-key');
  t.same({ completion: resolved.completion_retention_ms, journal: resolved.journal_retention_ms }, { completion: 2 * 86_400_000, journal: 5_400_000 }, 'new invocations get the new retentions');
  const view = await cli('services', 'config', 'view', 'Greeter');
  t.equal(view.code, 0, view.out);
  t.match(view.out, /2 days|2d/, view.out);

  const wf = await fetch(`${adminUrl}/services/Signup`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ workflow_completion_retention: 'P3D', public: null }) });
  t.equal(wf.status, 200);
  t.equal((await wf.json()).workflow_completion_retention, '3d');
  t.equal(registry.service('Signup').handlers.find((h) => h.ty === 'Workflow').workflow_completion_retention_ms, 3 * 86_400_000);

  const refused = async (name, body, status, message) => {
    const r = await fetch(`${adminUrl}/services/${name}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await r.text();
    t.equal(r.status, status, `${JSON.stringify(body)} → ${status}: ${text}`);
    t.match(text, message);
  };
  await refused('Greeter', { workflow_completion_retention: '1d' }, 400, 'modifying retention time for service type Service is unsupported');
  await refused('Greeter', { idempotency_retention: 'soon' }, 400, /KEEL0002.*idempotency_retention/);
  await refused('Greeter', { public: 'yes' }, 400, /KEEL0002.*public/);
  await refused('Greeter', { retention: '1d' }, 400, /KEEL0002.*unknown field 'retention'/);
  await refused('Nope', { public: true }, 404, /KEEL0004/);
  await refused('Greeter', { state_ttl: '1d' }, 400, /KEEL0002.*a state TTL applies to virtual objects and workflows/);
  await refused('Signup', { state_ttl_from: 'last_write' }, 400, /KEEL0002.*state_ttl_from needs a state_ttl/);
  await refused('Signup', { state_ttl: '500ms' }, 400, /KEEL0002.*from 1s to 100 years/);
  await refused('Signup', { state_ttl: '0.4ms' }, 400, /KEEL0002.*from 1s to 100 years/);
  await refused('Signup', { state_ttl: '200000000d' }, 400, /KEEL0002.*from 1s to 100 years/);
  const ttl = await fetch(`${adminUrl}/services/Signup`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ state_ttl: '30d' }) });
  t.same(((j) => [j.state_ttl, j.state_ttl_from])(await ttl.json()), ['30d', 'last_access'], "Keel's own state TTL, counted from the last access unless told");
  t.same(registry.stateTtls(), [{ service: 'Signup', ttl_ms: 30 * 86_400_000, on_access: true }], 'in the book the partitions fold with');
  const badCli = await cli('services', 'config', 'patch', 'Nope', '--public', 'true', '--yes');
  t.not(badCli.code, 0, 'the CLI reports the refusal');

  t.equal((await cli('deployments', 'register', await serveH2(t, [greeter, signup]), '--yes')).code, 0);
  const next = registry.service('Greeter');
  t.same({ revision: next.revision, public: next.public, idem: next.idempotency_retention_ms }, { revision: 2, public: true, idem: undefined }, 'a new deployment brings the endpoint\'s options, as Restate');
  t.equal(registry.service('Signup').state_ttl_ms, 30 * 86_400_000, 'but keeps the state TTL, which no endpoint declares');
});
