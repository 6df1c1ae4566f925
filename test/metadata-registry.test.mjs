import t from 'tap';
import { newDeploymentId } from '../dist/common/ids.js';

const unknownId = newDeploymentId();
import fs from 'node:fs';
import path from 'node:path';
import { Registry } from '../dist/metadata/registry.js';
import { silentLogger } from '../dist/common/logger.js';
import { isDeploymentId } from '../dist/common/ids.js';
import {
  tempDir, testConfig, serveH2, serveH1, serveSwitchH2, serveRawH1,
  greeter, greeterV2, greeterOtherHandler, greeterAsObject, counter, reserved, manifest,
} from './services/meta-helpers.mjs';

async function openRegistry(t, dir = tempDir(t)) {
  const reg = await Registry.open(testConfig(dir), silentLogger);
  t.teardown(() => reg.close());
  return reg;
}

async function rejectsCode(t, promise, code, status, re) {
  try {
    await promise;
    t.fail(`expected ${code}`);
  } catch (err) {
    t.equal(err.code, code, `${code}: ${err.message}`);
    if (status !== undefined) t.equal(err.status, status, `status ${status}`);
    if (re) t.match(err.message, re);
    return err;
  }
}

t.test('register over HTTP/2 and HTTP/1.1; revisions across deployments', async (t) => {
  const reg = await openRegistry(t);
  const uri1 = await serveH2(t, [greeter, counter]);
  const r1 = await reg.register({ uri: uri1 });
  t.equal(r1.created, true);
  t.ok(isDeploymentId(r1.deployment.id));
  t.equal(r1.deployment.protocol_type, 'BidiStream');
  t.equal(r1.deployment.use_http_11, false);
  t.same(r1.deployment.services.map((s) => [s.name, s.revision]).sort(), [['Counter', 1], ['Greeter', 1]]);
  t.equal(reg.service('Greeter').revision, 1);
  t.equal(reg.service('Greeter').deployment_id, r1.deployment.id);

  const uri2 = await serveH1(t, [greeterV2]);
  const r2 = await reg.register({ uri: uri2, use_http_11: true });
  t.equal(r2.created, true);
  t.not(r2.deployment.id, r1.deployment.id);
  t.equal(r2.deployment.protocol_type, 'RequestResponse');
  t.equal(r2.deployment.use_http_11, true);
  t.equal(reg.service('Greeter').revision, 2);
  t.equal(reg.service('Greeter').deployment_id, r2.deployment.id);
  t.equal(reg.service('Counter').revision, 1);
  t.same(reg.handler('Greeter', 'farewell').handler.name, 'farewell');
  t.equal(reg.handler('Greeter', 'nope'), undefined);
  t.equal(reg.deployments().length, 2);
  t.same(reg.services().map((s) => s.name), ['Counter', 'Greeter']);
  // The old deployment still reports the revision it got.
  t.equal(reg.deployment(r1.deployment.id).services.find((s) => s.name === 'Greeter').revision, 1);

  // Removing the latest falls back to the older revision.
  t.equal(await reg.remove(r2.deployment.id), true);
  t.equal(await reg.remove(r2.deployment.id), false);
  t.equal(reg.service('Greeter').revision, 1);
  // A later deployment still bumps above every revision ever given.
  const uri3 = await serveH2(t, [greeterV2]);
  const r3 = await reg.register({ uri: uri3 });
  t.equal(r3.deployment.services[0].revision, 3);
});

t.test('idempotent re-register, META0004, force replace, dry run', async (t) => {
  const reg = await openRegistry(t);
  const ep = await serveSwitchH2(t, [greeter]);
  const r1 = await reg.register({ uri: ep.uri });
  const again = await reg.register({ uri: ep.uri.replace(/\/$/, '') });
  t.equal(again.created, false);
  t.equal(again.deployment.id, r1.deployment.id);
  t.equal(reg.service('Greeter').revision, 1, 'nothing new written');

  ep.use([greeterV2]);
  await rejectsCode(t, reg.register({ uri: ep.uri }), 'META0004', 409, /force/);

  const dry = await reg.register({ uri: ep.uri, force: true, dry_run: true });
  t.equal(dry.created, false);
  t.equal(dry.deployment.id, r1.deployment.id);
  t.equal(reg.service('Greeter').handlers.length, 1, 'dry run persisted nothing');

  const forced = await reg.register({ uri: ep.uri, force: true });
  t.equal(forced.created, false);
  t.equal(forced.deployment.id, r1.deployment.id, 'force keeps the id');
  t.equal(reg.deployments().length, 1);
  t.equal(reg.service('Greeter').revision, 2);
  t.equal(reg.service('Greeter').handlers.length, 2);

  const ep2 = await serveH2(t, [counter]);
  const dryNew = await reg.register({ uri: ep2, dry_run: true });
  t.equal(dryNew.created, true);
  t.ok(isDeploymentId(dryNew.deployment.id));
  t.equal(reg.deployments().length, 1);
  t.equal(reg.service('Counter'), undefined);
});

t.test('META0006 without force, allowed with force or breaking', async (t) => {
  const reg = await openRegistry(t);
  await reg.register({ uri: await serveH2(t, [greeter]) });
  const typeChange = await serveH2(t, [greeterAsObject]);
  await rejectsCode(t, reg.register({ uri: typeChange }), 'META0006', 409, /service type/);
  const removed = await serveH2(t, [greeterOtherHandler]);
  await rejectsCode(t, reg.register({ uri: removed }), 'META0006', 409, /'greet'/);
  t.equal(reg.deployments().length, 1);
  const viaBreaking = await reg.register({ uri: removed, breaking: true });
  t.equal(viaBreaking.created, true);
  t.equal(reg.service('Greeter').revision, 2);
  const viaForce = await reg.register({ uri: typeChange, force: true });
  t.equal(viaForce.created, true);
  t.equal(reg.service('Greeter').ty, 'VirtualObject');
  t.equal(reg.service('Greeter').revision, 3);
});

t.test('reserved names: META0005', async (t) => {
  const reg = await openRegistry(t);
  await rejectsCode(t, reg.register({ uri: await serveH2(t, [reserved]) }), 'META0005', 400, /reserved/);
  const raw = await serveRawH1(t, { body: manifest({ services: [{ name: 'openapi', ty: 'SERVICE', handlers: [] }] }) });
  await rejectsCode(t, reg.register({ uri: raw.uri, use_http_11: true }), 'META0005', 400);
  t.equal(reg.deployments().length, 0);
});

t.test('additional headers are stored and sent on discovery', async (t) => {
  const reg = await openRegistry(t);
  const uri = await serveH2(t, [greeter], { requiredHeader: ['x-token', 'abc'] });
  await rejectsCode(t, reg.register({ uri }), 'META0003', 502, /401/);
  const r = await reg.register({ uri, additional_headers: { 'x-token': 'abc' } });
  t.same(r.deployment.additional_headers, { 'x-token': 'abc' });
});

t.test('update in place: META0016, shared destination, META0017', async (t) => {
  const reg = await openRegistry(t);
  const a = await serveSwitchH2(t, [greeter, counter]);
  const b = await serveSwitchH2(t, [counter]);
  const da = (await reg.register({ uri: a.uri })).deployment;
  const db = (await reg.register({ uri: b.uri, breaking: true })).deployment;

  // Same metadata with a new handler: allowed; revision kept.
  a.use([greeterV2, counter]);
  const upd = await reg.updateInPlace(da.id, {});
  t.equal(upd.id, da.id);
  t.equal(upd.services.find((s) => s.name === 'Greeter').revision, 1);
  t.equal(reg.deployment(da.id).services.find((s) => s.name === 'Greeter').handlers.length, 2);

  // Removing a handler, a service, or changing a type is refused.
  a.use([greeterOtherHandler, counter]);
  await rejectsCode(t, reg.updateInPlace(da.id, {}), 'META0016', 409, /greet/);
  a.use([greeterV2]);
  await rejectsCode(t, reg.updateInPlace(da.id, {}), 'META0016', 409, /Counter/);
  a.use([greeterAsObject, counter]);
  await rejectsCode(t, reg.updateInPlace(da.id, {}), 'META0016', 409, /type/);
  await rejectsCode(t, reg.updateInPlace(unknownId, {}), 'KEEL0004', 404);

  // Protocol versions must stay exactly equal.
  const raw = await serveRawH1(t, { body: manifest({ minProtocolVersion: 5, maxProtocolVersion: 6, services: [{ name: 'Counter', ty: 'VIRTUAL_OBJECT', handlers: [{ name: 'add' }, { name: 'get', ty: 'SHARED' }] }] }) });
  await rejectsCode(t, reg.updateInPlace(db.id, { uri: raw.uri, use_http_11: true }), 'META0016', 409, /protocol versions/);

  // Moving deployment b to a's URI creates the shared-destination state.
  a.use([greeterV2, counter]);
  b.use([greeterV2, counter]);
  const moved = await reg.updateInPlace(db.id, { uri: a.uri });
  t.equal(moved.uri, a.uri);
  t.equal(reg.deployments().filter((d) => d.uri === a.uri).length, 2);
  // Dry-run update persists nothing.
  await reg.updateInPlace(db.id, { uri: b.uri, dry_run: true });
  t.equal(reg.deployment(db.id).uri, a.uri);

  a.use([counter]);
  await rejectsCode(t, reg.register({ uri: a.uri, force: true }), 'META0017', 409, /DELETE/);
  await reg.remove(db.id);
  const forced = await reg.register({ uri: a.uri, force: true });
  t.equal(forced.deployment.id, da.id);
});

t.test('persistence across close/reopen', async (t) => {
  const dir = tempDir(t);
  const reg = await Registry.open(testConfig(dir), silentLogger);
  const ep = await serveSwitchH2(t, [greeter]);
  const r1 = await reg.register({ uri: ep.uri, additional_headers: { 'x-a': '1' } });
  const r2 = await reg.register({ uri: await serveH1(t, [greeterV2, counter]), use_http_11: true });
  ep.use([greeterV2]);
  await reg.updateInPlace(r1.deployment.id, {});
  const r3 = await reg.register({ uri: await serveH2(t, [counter]) });
  await reg.remove(r3.deployment.id);
  const snapshot = JSON.stringify({ d: reg.deployments(), s: reg.services() });
  await reg.close();

  const again = await Registry.open(testConfig(dir), silentLogger);
  t.teardown(() => again.close());
  t.equal(JSON.stringify({ d: again.deployments(), s: again.services() }), snapshot);
  t.equal(again.service('Greeter').revision, 2);
  t.equal(again.service('Greeter').deployment_id, r2.deployment.id);
  t.same(again.deployment(r1.deployment.id).additional_headers, { 'x-a': '1' });
  t.equal(again.deployment(r3.deployment.id), undefined);
  // Revision counters survive too (Counter reached 2 in the removed deployment).
  const r4 = await again.register({ uri: await serveH2(t, [counter]) });
  t.equal(r4.deployment.services[0].revision, 3);
  t.ok(fs.existsSync(path.join(dir, 'KEEL_META_FORMAT_VERSION')));
});

t.test('storage checks: META0011, META0010, META0005, lock', async (t) => {
  const noVersion = tempDir(t);
  fs.writeFileSync(path.join(noVersion, 'stray'), 'x');
  await rejectsCode(t, Registry.open(testConfig(noVersion), silentLogger), 'META0011', undefined, /version file/);

  const future = tempDir(t);
  fs.writeFileSync(path.join(future, 'KEEL_META_FORMAT_VERSION'), '99\n');
  await rejectsCode(t, Registry.open(testConfig(future), silentLogger), 'META0010', undefined, /99/);

  const fresh = path.join(tempDir(t), 'does', 'not', 'exist');
  const reg = await Registry.open(testConfig(fresh), silentLogger);
  t.equal(reg.deployments().length, 0);
  const locked = await Registry.open(testConfig(fresh), silentLogger).then(
    (r) => { r.close(); return undefined; },
    (err) => err,
  );
  t.ok(locked, 'second open fails');
  t.match(locked.message, /locked by another process/);
  await reg.close();

  // A corrupt record → META0005.
  const { ClassicLevel } = await import('classic-level');
  const db = new ClassicLevel(path.join(fresh, 'log'), { keyEncoding: 'utf8', valueEncoding: 'utf8' });
  await db.put('r/0000000000000001', '{not json');
  await db.close();
  await rejectsCode(t, Registry.open(testConfig(fresh), silentLogger), 'META0005', undefined, /wipe meta.storage_path/);
});

t.test('a rule book change made from an older book (another node committed first) is dropped everywhere and answered META0018', async (t) => {
  const { upsertRules, EMPTY_RULE_BOOK } = await import('../dist/common/limit-rules.js');
  // A cluster's metadata log as a node sees it: records of other nodes are applied before its own append lands.
  let remote;
  const pending = [];
  const log = {
    async append() {
      for (const r of pending.splice(0)) remote(r);
    },
    async close() {},
    follow(f) {
      remote = f;
    },
  };
  const reg = new Registry(log, silentLogger, async () => {
    throw new Error('no discovery here');
  }, undefined, []);
  log.follow((rec) => reg.applyRemote(rec));
  const handed = [];
  reg.onRemoteLimitRules((b) => handed.push(b.rules.map((r) => r.pattern)));
  // Node B committed {x} as v1; this node has not read it yet when it puts {y}.
  pending.push({ kind: 'limit_rules_replaced', book: upsertRules(EMPTY_RULE_BOOK, [{ pattern: 'x', limits: { concurrency: 1 } }], 1).book });
  const err = await reg.upsertLimitRules([{ pattern: 'y', limits: { concurrency: 2 }, precondition: { type: 'does_not_exist' } }]).then(() => undefined, (e) => e);
  t.equal(err?.code, 'META0018', 'the stale change is refused: retry');
  t.same(reg.limitRules().rules.map((r) => r.pattern), ['x'], "B's change stands");
  t.same(handed, [['x']], "the partitions were handed B's book, and only it");
  // The retry reads the book as it is now.
  const ok = await reg.upsertLimitRules([{ pattern: 'y', limits: { concurrency: 2 }, precondition: { type: 'does_not_exist' } }]);
  t.same(ok.book.rules.map((r) => r.pattern), ['x', 'y']);
  t.equal(ok.book.version, 2);
});

t.test('a replica (partitions on another thread) starts from the history and follows every record applied after, in order', async (t) => {
  const main = await openRegistry(t);
  const r1 = await main.register({ uri: await serveH2(t, [greeter, counter]) });
  await main.setDeploymentConcurrency(r1.deployment.id, 3);
  await main.upsertLimitRules([{ pattern: 'x', limits: { concurrency: 2 } }]);
  const history = [...main.history()];
  t.same(history.map((r) => r.kind), ['deployment_added', 'deployment_limit_set', 'limit_rules_replaced'], 'every record applied, in order');
  const replica = Registry.replica(testConfig(tempDir(t)), silentLogger, history, (apply) => main.onRecord(apply));
  const same = (what) => {
    t.same(replica.services(), main.services(), `${what}: the same services`);
    t.same(replica.deployments(), main.deployments(), `${what}: the same deployments`);
    t.same(replica.limitRules(), main.limitRules(), `${what}: the same rule book`);
    t.same(replica.deploymentLimitsOf(r1.deployment.id), main.deploymentLimitsOf(r1.deployment.id), `${what}: the same deployment limits`);
  };
  same('from the history');
  t.equal(replica.deploymentConcurrency(r1.deployment.id), 3);
  const fired = [];
  replica.onServicesChanged(() => fired.push('services'));
  replica.onDeploymentLimits(() => fired.push('limits'));
  replica.onRemoteLimitRules(() => fired.push('rules'));
  const r2 = await main.register({ uri: await serveH2(t, [greeterV2]) });
  await main.setDeploymentConcurrency(r1.deployment.id, null);
  await main.deleteLimitRules([{ pattern: 'x' }]);
  t.equal(await main.remove(r1.deployment.id), true);
  same('after four more changes');
  t.equal(replica.service('Greeter').deployment_id, r2.deployment.id, 'the new revision');
  t.equal(replica.deploymentConcurrency(r1.deployment.id), undefined);
  t.ok(fired.includes('services') && fired.includes('limits') && fired.includes('rules'), `its listeners fired as the records came (${fired.join(', ')})`);
  await t.rejects(replica.register({ uri: 'http://127.0.0.1:1' }), /a replica of the schema registry discovers nothing/, 'it discovers nothing');
  await t.rejects(replica.setDeploymentConcurrency(r2.deployment.id, 1), /a replica of the schema registry appends nothing/, 'and writes nothing');
  t.same(main.deployments().map((d) => d.id), [r2.deployment.id], 'the main registry is unchanged by them');
  main.history().length = 0;
  t.equal(main.history().length, 7, 'history() is a copy');
  await replica.close();
  await main.setDeploymentConcurrency(r2.deployment.id, 5);
  t.equal(main.deploymentConcurrency(r2.deployment.id), 5);
  t.equal(replica.deploymentConcurrency(r2.deployment.id), undefined, 'a closed replica follows no more');
});
