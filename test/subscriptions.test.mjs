// Subscriptions (validation and storage; Kafka delivery comes later) against a real Keel process:
// `[[ingress.kafka_clusters]]` in the config file (RT0002 on bad input), POST/GET/DELETE
// /subscriptions with every META0009 case, GET /kafka-clusters, persistence across a restart and
// after the sink's deployment is removed, and the real `restate subscriptions ls` /
// `restate kafka-clusters ls`.
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { execFile, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import * as restate from '@restatedev/restate-sdk';
import { loadConfig } from '../dist/config/index.js';
import { startKeel, serveServices, register, ingress, tempDir, adminCall as admin } from './helpers/keel.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const CLI = path.join(root, 'node_modules', '.bin', 'restate');
const SUB_ID = /^sub_1[0-9a-zA-Z]{22}$/;

const CONFIG = `
[[ingress.kafka_clusters]]
name = "my-cluster"
brokers = ["127.0.0.1:9092"]

[[ingress.kafka_clusters]]
name = "other"
brokers = ["127.0.0.1:19092", "localhost:29092"]
"security.protocol" = "plaintext"
`;

const orders = restate.service({ name: 'Orders', handlers: { process: async (_ctx, x) => ({ got: x }) } });
const carts = restate.object({ name: 'Carts', handlers: { add: async (_ctx, x) => x } });
const signup = restate.workflow({
  name: 'Signup',
  handlers: { run: async () => 'done', getStatus: restate.handlers.workflow.shared(async () => 'ok') },
});

function writeConfig(t, text = CONFIG) {
  const file = path.join(tempDir(t), 'keel.toml');
  fs.writeFileSync(file, text);
  return file;
}

async function setup(t, { dir } = {}) {
  const file = writeConfig(t);
  const keel = await startKeel(t, { args: ['--config', file], ...(dir ? { dir } : {}) });
  const uri = await serveServices(t, [orders, carts, signup]);
  const dep = await register(keel, uri);
  return { keel, file, uri, dep };
}

function cli(keel, ...args) {
  const home = fs.mkdtempSync(path.join(path.dirname(keel.dir), 'keel-cli-home-'));
  return new Promise((resolve) => {
    execFile(
      CLI,
      args,
      { env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: keel.admin, RESTATE_CLI_CONFIG_HOME: home, NO_COLOR: '1', TERM: 'dumb' }, timeout: 60_000 },
      (err, stdout, stderr) => {
        fs.rmSync(home, { recursive: true, force: true });
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) });
      },
    );
  });
}

t.test('ingress.kafka_clusters in the config file: parsed, and RT0002 on bad input', async (t) => {
  const c = loadConfig(writeConfig(t), {});
  t.same(c.ingress.kafka_clusters, [
    { name: 'my-cluster', brokers: ['127.0.0.1:9092'], properties: { 'bootstrap.servers': '127.0.0.1:9092' } },
    {
      name: 'other',
      brokers: ['127.0.0.1:19092', 'localhost:29092'],
      properties: { 'bootstrap.servers': '127.0.0.1:19092,localhost:29092', 'security.protocol': 'plaintext' },
    },
  ]);
  t.same(loadConfig(undefined, {}).ingress.kafka_clusters, [], 'none by default');

  const bad = [
    [`[[ingress.kafka_clusters]]\nbrokers = ["127.0.0.1:9092"]\n`, /:1\b/, /name/],
    [`[[ingress.kafka_clusters]]\nname = "a/b"\nbrokers = ["127.0.0.1:9092"]\n`, /:2\b/, /name/],
    [`[[ingress.kafka_clusters]]\nname = "a"\nbrokers = []\n`, /:3\b/, /brokers/],
    [`[[ingress.kafka_clusters]]\nname = "a"\nbrokers = ["nohostport"]\n`, /:3\b/, /brokers/],
    [`[[ingress.kafka_clusters]]\nname = "a"\n`, /:1\b/, /brokers/],
    [`[[ingress.kafka_clusters]]\nname = "a"\nbrokers = ["h:1"]\n\n[[ingress.kafka_clusters]]\nname = "a"\nbrokers = ["h:2"]\n`, /:6\b/, /defined twice/],
    [`[ingress.kafka_clusters]\nname = "a"\nbrokers = ["h:1"]\n`, /kafka_clusters/, /array of tables/],
    [`[ingress]\nkafka_clusters = "a"\n`, /kafka_clusters/, /array of tables/],
  ];
  for (const [text, line, what] of bad) {
    const file = writeConfig(t, text);
    try {
      loadConfig(file, {});
      t.fail(`no error for ${JSON.stringify(text)}`);
    } catch (err) {
      t.equal(err.code, 'RT0002', err.message);
      t.match(err.message, file);
      t.match(err.message, line, `line in ${err.message}`);
      t.match(err.message, what);
    }
  }
});

t.test('a real Keel refuses a bad kafka cluster in its config file with RT0002', async (t) => {
  const dir = tempDir(t);
  const file = writeConfig(t, `[[ingress.kafka_clusters]]\nname = "x"\nbrokers = [9092]\n`);
  const proc = spawn(process.execPath, [path.join(root, 'dist/main.js'), '--config', file], {
    cwd: dir,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, KEEL_BASE_DIR: path.join(dir, 'data'), KEEL_LOG__FORMAT: 'json' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  const code = await new Promise((resolve) => proc.once('exit', (c) => resolve(c)));
  t.not(code, 0);
  t.match(out, /RT0002/);
  t.match(out, /brokers/);
});

t.test('META0009: every invalid subscription is refused with 400 and the reason', async (t) => {
  const { keel } = await setup(t);
  const cases = [
    [{ sink: 'service://Orders/process' }, /source/],
    [{ source: 'kafka://my-cluster/orders' }, /sink/],
    [{ source: 'http://my-cluster/orders', sink: 'service://Orders/process' }, /kafka:\/\/<cluster>\/<topic>/],
    [{ source: 'kafka:///orders', sink: 'service://Orders/process' }, /kafka:\/\/<cluster>\/<topic>/],
    [{ source: 'kafka://my-cluster/', sink: 'service://Orders/process' }, /kafka:\/\/<cluster>\/<topic>/],
    [{ source: 'kafka://my-cluster', sink: 'service://Orders/process' }, /kafka:\/\/<cluster>\/<topic>/],
    [{ source: 'kafka://my-cluster/a/b', sink: 'service://Orders/process' }, /kafka:\/\/<cluster>\/<topic>/],
    [{ source: 'kafka://my-cluster/bad$topic', sink: 'service://Orders/process' }, /topic/],
    [{ source: 'kafka://nope/orders', sink: 'service://Orders/process' }, /cluster 'nope'.*not configured/],
    [{ source: 'kafka://my-cluster/orders', sink: 'Orders/process' }, /service:\/\/<service>\/<handler>/],
    [{ source: 'kafka://my-cluster/orders', sink: 'service://Orders' }, /service:\/\/<service>\/<handler>/],
    [{ source: 'kafka://my-cluster/orders', sink: 'service:///process' }, /service:\/\/<service>\/<handler>/],
    [{ source: 'kafka://my-cluster/orders', sink: 'service://Missing/process' }, /service 'Missing' is not registered/],
    [{ source: 'kafka://my-cluster/orders', sink: 'service://Orders/nope' }, /no handler 'nope'/],
    [{ source: 'kafka://my-cluster/orders', sink: 'service://Orders/process', options: { 'auto.offset.reset': 1 } }, /options/],
    [{ source: 'kafka://my-cluster/orders', sink: 'service://Orders/process', options: ['x'] }, /options/],
  ];
  for (const [body, why] of cases) {
    const r = await admin(keel, 'POST', '/subscriptions', body);
    t.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    t.equal(r.json?.restate_code, 'META0009', JSON.stringify(body));
    t.match(r.json?.message, why, JSON.stringify(body));
  }
  t.same((await admin(keel, 'GET', '/subscriptions')).json, { subscriptions: [] }, 'nothing was stored');
  t.match(keel.logs(), /META0009/, 'refusals are logged with the code');
  // Keel keeps serving.
  t.equal((await ingress(keel, '/Orders/process', 1)).status, 200);
  t.equal(keel.proc.exitCode, null);
});

t.test('create, list, get and delete subscriptions; they survive a restart and the removal of the sink deployment', async (t) => {
  const { keel, dep } = await setup(t);
  const a = await admin(keel, 'POST', '/subscriptions', {
    source: 'kafka://my-cluster/orders',
    sink: 'service://Orders/process',
    options: { 'auto.offset.reset': 'earliest' },
  });
  t.equal(a.status, 201, a.text);
  t.match(a.json.id, SUB_ID);
  t.same(a.json, { id: a.json.id, source: 'kafka://my-cluster/orders', sink: 'service://Orders/process', options: { 'auto.offset.reset': 'earliest' } });
  const b = await admin(keel, 'POST', '/v4/subscriptions', { source: 'kafka://other/carts', sink: 'service://Carts/add' });
  t.equal(b.status, 201, b.text);
  t.same(b.json.options, {});
  const c = await admin(keel, 'POST', '/subscriptions', { source: 'kafka://my-cluster/signups', sink: 'service://Signup/getStatus' });
  t.equal(c.status, 201, `a workflow's shared handler is a valid sink: ${c.text}`);
  const run = await admin(keel, 'POST', '/subscriptions', { source: 'kafka://my-cluster/signups', sink: 'service://Signup/run' });
  t.equal(run.status, 201, `and so is its run handler, as in Restate: ${run.text}`);
  t.equal((await admin(keel, 'DELETE', `/subscriptions/${run.json.id}`)).status, 202);
  t.not(a.json.id, b.json.id);

  const list = await admin(keel, 'GET', '/subscriptions');
  t.same(list.json.subscriptions.map((s) => s.id), [a.json.id, b.json.id, c.json.id]);
  t.same((await admin(keel, 'GET', `/subscriptions/${a.json.id}`)).json, a.json);
  t.equal((await admin(keel, 'GET', '/subscriptions/sub_1aaaaaaaaaaaaaaaaaaaaaa')).status, 404);
  t.equal((await admin(keel, 'GET', '/subscriptions/nope')).status, 400);

  t.equal((await admin(keel, 'DELETE', `/subscriptions/${c.json.id}`)).status, 202);
  t.equal((await admin(keel, 'DELETE', `/subscriptions/${c.json.id}`)).status, 404, 'deleting twice');
  t.equal((await admin(keel, 'GET', `/subscriptions/${c.json.id}`)).status, 404);

  const clusters = await admin(keel, 'GET', '/kafka-clusters');
  t.match(clusters.json.clusters[0].created_at, /^\d{4}-\d\d-\d\dT/, 'timestamps are RFC 3339 (the CLI requires them)');
  t.same(clusters.json, {
    clusters: [
      { name: 'my-cluster', properties: { 'bootstrap.servers': '127.0.0.1:9092' }, created_at: clusters.json.clusters[0].created_at, modified_at: clusters.json.clusters[0].created_at },
      { name: 'other', properties: { 'bootstrap.servers': '127.0.0.1:19092,localhost:29092', 'security.protocol': 'plaintext' }, created_at: clusters.json.clusters[0].created_at, modified_at: clusters.json.clusters[0].created_at },
    ],
  });

  // A real restart: the subscriptions come back from the metadata log.
  await keel.restart();
  t.same((await admin(keel, 'GET', '/subscriptions')).json.subscriptions, [a.json, b.json]);

  // As in Restate, removing the sink's deployment keeps the subscriptions.
  t.equal((await admin(keel, 'DELETE', `/deployments/${dep.id}?force=true`)).status, 202);
  t.same((await admin(keel, 'GET', '/subscriptions')).json.subscriptions, [a.json, b.json]);
  const refused = await admin(keel, 'POST', '/subscriptions', { source: 'kafka://my-cluster/orders', sink: 'service://Orders/process' });
  t.equal(refused.json?.restate_code, 'META0009', 'but new ones need the sink registered');
  await keel.restart();
  t.same((await admin(keel, 'GET', '/subscriptions')).json.subscriptions, [a.json, b.json], 'still there after another restart');
  t.equal(keel.proc.exitCode, null);
});

t.test('restate subscriptions ls and restate kafka-clusters ls (real CLI)', async (t) => {
  const { keel } = await setup(t);
  const empty = await cli(keel, 'subscriptions', 'ls');
  t.equal(empty.code, 0, empty.out);
  const a = await admin(keel, 'POST', '/subscriptions', { source: 'kafka://my-cluster/orders', sink: 'service://Orders/process' });
  t.equal(a.status, 201);
  const ls = await cli(keel, 'subscriptions', 'ls');
  t.equal(ls.code, 0, ls.out);
  t.match(ls.out, a.json.id);
  t.match(ls.out, 'kafka://my-cluster/orders');
  t.match(ls.out, 'service://Orders/process');
  const kc = await cli(keel, 'kafka-clusters', 'ls');
  t.equal(kc.code, 0, kc.out);
  t.match(kc.out, 'my-cluster');
  t.match(kc.out, 'other');
});
