// The `keel` CLI against a real Keel and real SDK services: every command, its --json output
// parsed, its exit codes, bulk actions with and without confirmation, and no colours when
// stdout/stderr are pipes. The CLI runs as a separate process on the machine's Node (20).
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { adminCall, eventually, freePort, ingress, query, serveServices, startKeel } from './helpers/keel.mjs';
import { cliNode, hasEscapes, keelCli } from './helpers/keel-cli.mjs';
import { catalogue } from '../dist/errors/index.js';

const fastPause = {
  KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms',
  KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '3',
  KEEL_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS: 'pause',
};

function greeter(extraHandlers = {}) {
  return restate.service({
    name: 'Greeter',
    handlers: {
      greet: async (_ctx, name) => `hi ${name}`,
      sleepy: async (ctx) => {
        await ctx.sleep(3_600_000);
        return 'late';
      },
      fail: async () => {
        throw new restate.TerminalError('nope', { errorCode: 418 });
      },
      ...extraHandlers,
    },
  });
}

const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, d) => {
      const v = ((await ctx.get('count')) ?? 0) + d;
      ctx.set('count', v);
      ctx.set('label', 'hello');
      return v;
    },
  },
});

/** Handlers whose code path changes between attempts: journal mismatch (RT0016). */
function drift() {
  const attempts = new Map();
  const bump = (k) => attempts.set(k, (attempts.get(k) ?? 0) + 1).get(k);
  return restate.service({
    name: 'Drift',
    handlers: {
      // same command type, another name on replay: a content mismatch
      rename: async (ctx, id) => {
        const n = bump(`rename-${id}`);
        await ctx.run(n === 1 ? 'charge' : 'charge-v2', () => 1);
        if (n === 1) throw new Error('first attempt fails after the run');
        return 'ok';
      },
      // another command type on replay: a type mismatch
      swap: async (ctx, id) => {
        const n = bump(`swap-${id}`);
        if (n === 1) {
          await ctx.run('a', () => 1);
          throw new Error('first attempt fails after the run');
        }
        await ctx.sleep(10);
        return 'ok';
      },
    },
  });
}

const SEND = (keel, path, body) => ingress(keel, `${path}/send`, body).then((r) => r.body.invocationId);

async function statusOf(keel, id) {
  return (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${id}'`))[0]?.status;
}

t.test('the CLI runs on the machine Node', async (t) => {
  const r = await keelCli(['--help']);
  t.equal(r.code, 0, r.err);
  t.match(r.out, /Exit codes:/);
  t.match(r.out, /KEEL_ADMIN_URL/);
  t.comment(`keel ran on ${cliNode}`);
});

t.test('deployments register, list, describe, remove', async (t) => {
  const keel = await startKeel(t);
  const admin = keel.admin;
  const uri = await serveServices(t, [greeter(), counter]);

  // Without a terminal and without --yes: the plan, then exit 5, nothing registered.
  const noYes = await keelCli(['deployments', 'register', uri], { admin });
  t.equal(noYes.code, 5, noYes.err);
  t.match(noYes.out, /New deployment at/);
  t.match(noYes.out, /Greeter\s+Service\s+new service\s+\+greet \+sleepy \+fail/);
  t.match(noYes.out, /Counter\s+VirtualObject\s+new service\s+\+add/);
  t.match(noYes.err, /--yes/);
  t.equal((await adminCall(keel, 'GET', '/deployments')).json.deployments.length, 0, 'nothing registered');
  t.notOk(hasEscapes(noYes.out + noYes.err), 'no colours in pipes');

  const reg = await keelCli(['deployments', 'register', uri, '--yes', '--json'], { admin });
  t.equal(reg.code, 0, reg.err);
  t.match(reg.json, { created: true, changed: true, services: [{ name: 'Greeter', change: 'new', revision: 1 }, { name: 'Counter', change: 'new' }] });
  t.same(reg.json.services[0].handlers_added, ['greet', 'sleepy', 'fail']);
  const id = reg.json.id;
  t.match(id, /^dp_/);
  t.equal((await adminCall(keel, 'GET', `/deployments/${id}`)).status, 200);

  const again = await keelCli(['deployments', 'register', uri], { admin });
  t.equal(again.code, 0, again.err);
  t.match(again.out, new RegExp(`${id} already serves .* nothing to change`));
  const againJson = await keelCli(['dp', 'add', uri, '--json'], { admin });
  t.match(againJson.json, { id, created: false, changed: false });

  // A new revision: one handler more, the type of the others unchanged.
  const uri2 = await serveServices(t, [greeter({ wave: async () => 'o/' })]);
  const plan = await keelCli(['deployments', 'register', uri2], { admin });
  t.equal(plan.code, 5);
  t.match(plan.out, /Greeter\s+Service\s+revision 1 → 2\s+\+wave/);
  const reg2 = await keelCli(['deployments', 'register', uri2, '-y', '--json'], { admin });
  t.equal(reg2.code, 0, reg2.err);
  t.match(reg2.json.services, [{ name: 'Greeter', change: 'updated', previous_revision: 1, revision: 2, handlers_added: ['wave'], handlers_removed: [] }]);
  const id2 = reg2.json.id;

  // Breaking change: Counter becomes a plain service -> META0006, its remedy, a hint.
  const uri3 = await serveServices(t, [restate.service({ name: 'Counter', handlers: { add: async () => 0 } })]);
  const breaking = await keelCli(['deployments', 'register', uri3, '--yes'], { admin });
  t.equal(breaking.code, 1);
  t.match(breaking.err, /error\[META0006\]/);
  t.ok(breaking.err.replace(/\s+/g, ' ').includes(catalogue.get('META0006').remedy), 'the catalogue remedy');
  t.match(breaking.err, /--breaking/);
  const breakingJson = await keelCli(['deployments', 'register', uri3, '--yes', '--json'], { admin });
  t.equal(breakingJson.code, 1);
  t.match(JSON.parse(breakingJson.err), { error: { restate_code: 'META0006', status: 409, exit_code: 1, remedy: catalogue.get('META0006').remedy } });

  // Nothing listening: META0003.
  const dead = await keelCli(['deployments', 'register', `http://127.0.0.1:${await freePort()}/`, '--yes'], { admin });
  t.equal(dead.code, 1);
  t.match(dead.err, /error\[META0003\]/);
  t.match(dead.err, /remedy: Check the URI\/ARN/);
  t.equal((await keelCli(['deployments', 'register', 'not a uri'], { admin })).code, 2);

  const ls = await keelCli(['deployments', 'list', '--json'], { admin });
  t.equal(ls.code, 0, ls.err);
  t.same(ls.json.map((d) => d.id).sort(), [id, id2].sort());
  t.equal(ls.json.find((d) => d.id === id).active, true, 'still the latest Counter');
  const lsText = await keelCli(['dp', 'ls'], { admin });
  t.match(lsText.out, /ID\s+ENDPOINT\s+TYPE\s+STATUS\s+CREATED\s+SERVICES/);
  t.match(lsText.out, new RegExp(`${id2}\\s+\\S+\\s+HTTP/2.0 BidiStream\\s+active`));

  // describe: services with their status, invocations pinned to it
  const sleeper = await SEND(keel, '/Greeter/sleepy', null);
  await eventually(async () => (await statusOf(keel, sleeper)) === 'running');
  const desc = await keelCli(['deployments', 'describe', id2, '--json'], { admin });
  t.equal(desc.code, 0, desc.err);
  t.match(desc.json, { id: id2, uri: uri2, services: [{ name: 'Greeter', revision: 2 }], pinned_invocations: [{ service: 'Greeter', handler: 'sleepy', count: 1 }] });
  const descText = await keelCli(['dp', 'get', id], { admin });
  t.equal(descText.code, 0, descText.err);
  t.match(descText.out, /Greeter\s+Service\s+1\s+superseded by rev 2/);
  t.match(descText.out, /Counter\s+VirtualObject\s+1\s+latest/);
  const unknown = `dp_1${'0'.repeat(21)}1`;
  t.equal((await keelCli(['dp', 'describe', unknown], { admin })).code, 3, 'unknown deployment');
  t.equal((await keelCli(['dp', 'describe', 'nope'], { admin })).code, 2, 'not a deployment id');

  // remove: refused while it serves the latest revision; --force asks; --yes removes
  const refused = await keelCli(['deployments', 'remove', id2], { admin });
  t.equal(refused.code, 1);
  t.match(refused.err, /latest revision of Greeter/);
  t.match(refused.err, /--force/);
  const notConfirmed = await keelCli(['deployments', 'remove', id2, '--force'], { admin });
  t.equal(notConfirmed.code, 5);
  t.equal((await adminCall(keel, 'GET', `/deployments/${id2}`)).status, 200, 'still there');
  const rm = await keelCli(['dp', 'rm', id2, '--force', '--yes', '--json'], { admin });
  t.equal(rm.code, 0, rm.err);
  t.same(rm.json, { id: id2, removed: true });
  t.equal((await adminCall(keel, 'GET', `/deployments/${id2}`)).status, 404);
  t.equal((await keelCli(['dp', 'rm', id2, '--force', '--yes'], { admin })).code, 3, 'already gone');
});

t.test('services ls and describe', async (t) => {
  const keel = await startKeel(t);
  const admin = keel.admin;
  await keelCli(['dp', 'register', await serveServices(t, [greeter(), counter]), '-y'], { admin });
  await ingress(keel, '/Greeter/greet', 'x');
  await ingress(keel, '/Greeter/fail', null);

  const ls = await keelCli(['services', 'ls', '--json'], { admin });
  t.equal(ls.code, 0, ls.err);
  t.same(ls.json.map((s) => [s.name, s.ty, s.revision]), [['Counter', 'VirtualObject', 1], ['Greeter', 'Service', 1]]);
  const lsText = await keelCli(['svc', 'list'], { admin });
  t.match(lsText.out, /Greeter\s+Service\s+1\s+yes\s+greet, sleepy, fail/);

  const d = await keelCli(['services', 'describe', 'Greeter', '--json'], { admin });
  t.equal(d.code, 0, d.err);
  t.same(d.json.handlers.map((h) => h.name), ['greet', 'sleepy', 'fail']);
  t.same(d.json.invocations.map((i) => [i.handler, i.status, i.count]).sort(), [['fail', 'completed', 1], ['greet', 'completed', 1]]);
  const text = await keelCli(['svc', 'describe', 'Counter'], { admin });
  t.match(text.out, /Type:\s+VirtualObject/);
  t.match(text.out, /Retry policy:\s+500ms ×2 up to 1m, 70 attempts, then pause/);
  t.match(text.out, /add\s+Exclusive\s+yes\s+application\/json/);
  const missing = await keelCli(['svc', 'describe', 'NoSuch'], { admin });
  t.equal(missing.code, 3);
  t.match(missing.err, /The requested service 'NoSuch' does not exist/);
});

t.test('invocations: ls with filters, describe, single and bulk actions', async (t) => {
  const keel = await startKeel(t, { env: fastPause });
  const admin = keel.admin;
  await keelCli(['dp', 'register', await serveServices(t, [greeter(), counter, drift()]), '-y'], { admin });
  const sleepers = [];
  for (let i = 0; i < 3; i++) sleepers.push(await SEND(keel, '/Greeter/sleepy', null));
  await ingress(keel, '/Greeter/greet', 'a');
  await ingress(keel, '/Greeter/fail', null);
  await ingress(keel, '/Counter/c1/add', 5);
  await ingress(keel, '/Counter/c2/add', 1);
  const renamed = await SEND(keel, '/Drift/rename', 1);
  const swapped = await SEND(keel, '/Drift/swap', 1);
  await eventually(async () => (await statusOf(keel, renamed)) === 'paused' && (await statusOf(keel, swapped)) === 'paused');
  await eventually(async () => (await Promise.all(sleepers.map((s) => statusOf(keel, s)))).every((s) => s === 'running'));

  const ids = async (...args) => {
    const r = await keelCli(['invocations', 'ls', '--json', ...args], { admin });
    t.equal(r.code, 0, `${args.join(' ')}: ${r.err}`);
    return r.json.map((x) => x.id).sort();
  };
  t.same(await ids(), [...sleepers, renamed, swapped].sort(), 'not completed by default');
  t.equal((await ids('--all')).length, 9);
  t.same(await ids('--service', 'Greeter', '--handler', 'sleepy'), [...sleepers].sort());
  t.same(await ids('--service', 'Drift,Greeter', '--status', 'paused'), [renamed, swapped].sort());
  t.equal((await ids('--key', 'c1', '--all')).length, 1);
  t.equal((await ids('-k', 'c1', '-k', 'c2', '--status', 'completed')).length, 2);
  t.same(await ids('--failure-code', 'RT0016'), [renamed, swapped].sort());
  t.equal((await ids('--failure-code', '418', '--all')).length, 1, 'terminal failure code');
  t.same(await ids('--older-than', '1h'), []);
  t.equal((await ids('--newer-than', '1h')).length, 5);
  t.equal((await ids('--limit', '2')).length, 2);
  const row = (await keelCli(['inv', 'ls', '--json', '--failure-code', '418', '--all'], { admin })).json[0];
  t.match(row, { target: 'Greeter/fail', status: 'completed', completion_failure: /^\[418\]/ });
  t.equal((await keelCli(['inv', 'ls', '--status', 'bogus'], { admin })).code, 2);
  t.equal((await keelCli(['inv', 'ls', '--older-than', 'soon'], { admin })).code, 2);
  const text = await keelCli(['inv', 'ls'], { admin });
  t.match(text.out, /ID\s+TARGET\s+STATUS\s+CREATED\s+RETRIES\s+FAILURE/);
  t.match(text.out, new RegExp(`${renamed}\\s+Drift/rename\\s+paused\\s+\\S+ ago\\s+3\\s+RT0016`));
  t.match(text.out, /Showing 5 of 5 invocations/);
  t.notOk(hasEscapes(text.out));

  // describe: the journal as a timeline, RT0016 side by side
  const dj = await keelCli(['invocations', 'describe', renamed, '--json'], { admin });
  t.equal(dj.code, 0, dj.err);
  t.match(dj.json.invocation, { id: renamed, status: 'paused', last_failure_error_code: 'RT0016' });
  t.same(dj.json.journal.map((j) => j.entry_type), ['Command: Input', 'Command: Run', 'Notification: Run']);
  t.match(dj.json.mismatch, {
    kind: 'content',
    command_index: 1,
    journal_index: 1,
    recorded: { entry_type: 'Command: Run', name: 'charge' },
    new: { entry_type: 'Command: Run', name: 'charge-v2' },
    differences: [{ field: 'name', recorded: 'charge', new: 'charge-v2' }],
  });
  const dt = await keelCli(['inv', 'get', renamed], { admin });
  t.equal(dt.code, 0, dt.err);
  t.match(dt.out, /Last failure \[RT0016\]: Journal mismatch on replay/);
  t.ok(dt.out.includes(`remedy: ${catalogue.get('RT0016').remedy}`));
  t.match(dt.out, /RECORDED \(journal\)\s+NEW \(this attempt\)/);
  t.match(dt.out, /name\s+charge\s+charge-v2/);
  t.match(dt.out, /Journal \(3 entries\)/);
  t.match(dt.out, /0\s+● Command: Input/);
  t.match(dt.out, /1\s+✗ Command: Run\s+"charge"\s+mismatch on replay/);
  t.match(dt.out, /2\s+◆ Notification: Run/);

  const sj = await keelCli(['inv', 'describe', swapped, '--json'], { admin });
  t.match(sj.json.mismatch, { kind: 'type', journal_index: 1, recorded: { entry_type: 'Command: Run', name: 'a' }, new: { entry_type: 'Command: Sleep', label: 'sleep' } });
  const st = await keelCli(['inv', 'describe', swapped], { admin });
  t.match(st.out, /entry\s+Command: Run\s+Command: Sleep/);

  const sleeping = await keelCli(['inv', 'describe', sleepers[0]], { admin });
  t.match(sleeping.out, /1\s+○ Command: Sleep\s+pending\s+until \S+ \S+ \(in 59m\)/);
  t.equal((await keelCli(['inv', 'describe', `inv_1${'0'.repeat(33)}`], { admin })).code, 3);

  // single ids: no confirmation
  const pause = await keelCli(['inv', 'pause', sleepers[0]], { admin });
  t.equal(pause.code, 0, pause.err);
  t.match(pause.out, /Paused 1 invocation/);
  await eventually(async () => (await statusOf(keel, sleepers[0])) === 'paused');
  const resume = await keelCli(['inv', 'resume', sleepers[0], '--json'], { admin });
  t.equal(resume.code, 0, resume.err);
  t.same(resume.json, { action: 'resume', matched: 1, done: [sleepers[0]], failed: [] });
  await eventually(async () => (await statusOf(keel, sleepers[0])) !== 'paused');
  t.equal((await keelCli(['inv', 'kill', `inv_1${'0'.repeat(33)}`], { admin })).code, 3, 'unknown invocation');
  t.equal((await keelCli(['inv', 'kill', 'bogus'], { admin })).code, 2, 'not an id');
  t.equal((await keelCli(['inv', 'kill'], { admin })).code, 2, 'neither ids nor a filter');
  t.equal((await keelCli(['inv', 'kill', renamed, '--service', 'Drift'], { admin })).code, 2, 'both ids and a filter');
  const completed = (await query(keel, `SELECT id FROM sys_invocation WHERE target = 'Greeter/greet'`))[0].id;
  const refused = await keelCli(['inv', 'kill', completed], { admin });
  t.equal(refused.code, 1);
  t.match(refused.err, /already completed/);

  // bulk on a filter: count, confirmation (refused without a terminal), --yes, --limit
  const noYes = await keelCli(['inv', 'kill', '--service', 'Greeter', '--handler', 'sleepy'], { admin });
  t.equal(noYes.code, 5);
  t.equal(noYes.out.split('\n').filter((l) => l.includes('Greeter/sleepy')).length, 3, 'the three listed');
  t.match(noYes.err, /Kill 3 invocations\?/);
  t.same(new Set(await Promise.all(sleepers.map((s) => statusOf(keel, s)))), new Set(['running']), 'nothing killed');

  const one = await keelCli(['inv', 'cancel', '--service', 'Greeter', '--handler', 'sleepy', '--limit', '1', '--yes', '--json'], { admin });
  t.equal(one.code, 0, one.err);
  t.match(one.json, { action: 'cancel', matched: 3, failed: [] });
  t.equal(one.json.done.length, 1);
  await eventually(async () => (await statusOf(keel, one.json.done[0])) === 'completed');

  const rest = await keelCli(['inv', 'kill', '-s', 'Greeter', '--handler', 'sleepy', '-y'], { admin });
  t.equal(rest.code, 0, rest.err);
  t.match(rest.out, /Killed 2 invocations\./);
  await eventually(async () => (await Promise.all(sleepers.map((s) => statusOf(keel, s)))).every((s) => s === 'completed'));
  const none = await keelCli(['inv', 'kill', '--service', 'Greeter', '--json'], { admin });
  t.equal(none.code, 0);
  t.same(none.json, { action: 'kill', matched: 0, done: [], failed: [] });

  const resumeAll = await keelCli(['inv', 'resume', '--failure-code', 'RT0016', '--yes', '--json'], { admin });
  t.equal(resumeAll.code, 0, resumeAll.err);
  t.same(resumeAll.json.done.sort(), [renamed, swapped].sort());

  const purge = await keelCli(['inv', 'purge', '--service', 'Greeter', '--yes', '--json'], { admin });
  t.equal(purge.code, 0, purge.err);
  t.equal(purge.json.done.length, 5, 'greet, fail and the three sleepers');
  t.same(await query(keel, `SELECT id FROM sys_invocation WHERE target_service_name = 'Greeter'`), []);
});

t.test('sql', async (t) => {
  const keel = await startKeel(t);
  const admin = keel.admin;
  await keelCli(['dp', 'register', await serveServices(t, [greeter()]), '-y'], { admin });
  await ingress(keel, '/Greeter/greet', 'a');
  await ingress(keel, '/Greeter/greet', 'b');
  const j = await keelCli(['sql', "SELECT target, COUNT(*) AS n FROM sys_invocation WHERE status = 'completed' GROUP BY target", '--json'], { admin });
  t.equal(j.code, 0, j.err);
  t.same(j.json, [{ target: 'Greeter/greet', n: 2 }]);
  const text = await keelCli(['sql', 'SELECT name, ty FROM sys_service'], { admin });
  t.equal(text.code, 0);
  t.match(text.out, /name\s+ty\nGreeter\s+service\n1 row/);
  const bad = await keelCli(['sql', 'SELEC nonsense'], { admin });
  t.equal(bad.code, 1);
  t.match(bad.err, /^error\[KEEL0010\]: Parser Error: syntax error/m, "the stable code and the engine's message");
  t.equal((await keelCli(['sql', '  '], { admin })).code, 2);
});

t.test('state get and set', async (t) => {
  const keel = await startKeel(t);
  const admin = keel.admin;
  await keelCli(['dp', 'register', await serveServices(t, [greeter(), counter]), '-y'], { admin });
  await ingress(keel, '/Counter/c1/add', 5);

  const g = await keelCli(['state', 'get', 'Counter', 'c1', '--json'], { admin });
  t.equal(g.code, 0, g.err);
  t.same(g.json, { count: 5, label: 'hello' });
  const one = await keelCli(['state', 'get', 'Counter', 'c1', 'label'], { admin });
  t.equal(one.out, '"hello"\n');
  const text = await keelCli(['state', 'get', 'Counter', 'c1'], { admin });
  t.match(text.out, /KEY\s+VALUE\ncount\s+5\nlabel\s+"hello"/);
  t.equal((await keelCli(['state', 'get', 'Counter', 'c1', 'nope'], { admin })).code, 3);
  t.same((await keelCli(['state', 'get', 'Counter', 'empty', '--json'], { admin })).json, {});
  t.equal((await keelCli(['state', 'get', 'Greeter', 'x'], { admin })).code, 2, 'a plain service has no state');
  t.equal((await keelCli(['state', 'get', 'NoSuch', 'x'], { admin })).code, 3);

  const noYes = await keelCli(['state', 'set', 'Counter', 'c1', 'count', '41'], { admin });
  t.equal(noYes.code, 5);
  t.match(noYes.out, /Counter\/c1 count: 5 → 41/);
  t.same((await keelCli(['state', 'get', 'Counter', 'c1', '--json'], { admin })).json, { count: 5, label: 'hello' }, 'unchanged');

  const set = await keelCli(['state', 'set', 'Counter', 'c1', 'count', '41', '--yes', '--json'], { admin });
  t.equal(set.code, 0, set.err);
  t.same(set.json, { count: 41, label: 'hello' });
  t.equal((await ingress(keel, '/Counter/c1/add', 1)).body, 42, 'the object sees the new value');
  const obj = await keelCli(['state', 'set', 'Counter', 'c1', 'extra', '{"a":[1,2]}', '-y'], { admin });
  t.equal(obj.code, 0, obj.err);
  const raw = await keelCli(['state', 'set', 'Counter', 'c1', 'note', 'plain text', '--raw', '-y'], { admin });
  t.equal(raw.code, 0, raw.err);
  t.same((await keelCli(['state', 'get', 'Counter', 'c1', '--json'], { admin })).json, { count: 42, label: 'hello', extra: { a: [1, 2] }, note: 'plain text' });
  const unset = await keelCli(['state', 'set', 'Counter', 'c1', 'note', '--unset', '-y', '--json'], { admin });
  t.equal(unset.code, 0, unset.err);
  t.same(Object.keys(unset.json).sort(), ['count', 'extra', 'label']);
  t.equal((await keelCli(['state', 'set', 'Counter', 'c1', 'note', '--unset', '-y'], { admin })).code, 3, 'no such entry');
  t.equal((await keelCli(['state', 'set', 'Counter', 'c1', 'count', 'not json', '-y'], { admin })).code, 2);
  t.equal((await keelCli(['state', 'set', 'Counter', 'c1', 'count'], { admin })).code, 2, 'no value');
  t.same(await query(keel, `SELECT key FROM state WHERE service_key = 'c1' ORDER BY key`), [{ key: 'count' }, { key: 'extra' }, { key: 'label' }]);
});

t.test('schedules set, ls, describe, trigger, pause, delete', async (t) => {
  const keel = await startKeel(t);
  const admin = keel.admin;
  await keelCli(['dp', 'register', await serveServices(t, [counter]), '-y'], { admin });
  const set = await keelCli(['schedules', 'set', 'nightly', 'Counter/s1/add', '--cron', '0 2 * * *', '--timezone', 'Europe/Berlin', '--input', '3', '--json'], { admin });
  t.equal(set.code, 0, set.err);
  t.same({ target: set.json.target, cron: set.json.cron, timezone: set.json.timezone, overlap: set.json.overlap, catchup: set.json.catchup }, { target: 'Counter/s1/add', cron: '0 2 * * *', timezone: 'Europe/Berlin', overlap: 'skip', catchup: 'one' });
  t.match(set.json.next_fire_at, /T0[01]:00:00\.000Z$/, '02:00 in Berlin is 00:00 or 01:00 UTC');
  const bad = await keelCli(['schedules', 'set', 'bad', 'Counter/s1/add', '--every', '5ms'], { admin });
  t.equal(bad.code, 1);
  t.match(bad.err, /KEEL1001[\s\S]*every must be an interval/);
  const ls = await keelCli(['sched', 'ls'], { admin });
  t.match(ls.out, /NAME\s+TARGET\s+WHEN[\s\S]*nightly\s+Counter\/s1\/add\s+cron 0 2 \* \* \* \(Europe\/Berlin\)/);
  const fired = await keelCli(['schedules', 'trigger', 'nightly', '--json'], { admin });
  t.same({ fired: fired.json.fired, triggered: fired.json.triggered }, { fired: 1, triggered: true });
  await eventually(async () => (await keelCli(['state', 'get', 'Counter', 's1', 'count'], { admin })).out === '3\n');
  // The firing's end reaches the schedule just after the handler's state is written.
  const desc = await eventually(async () => {
    const d = await keelCli(['schedules', 'describe', 'nightly'], { admin });
    return /Last outcome/.test(d.out) ? d : undefined;
  });
  t.match(desc.out, /Last outcome:\s+succeeded/);
  t.equal((await keelCli(['schedules', 'pause', 'nightly', '--json'], { admin })).json.paused, true);
  t.equal((await keelCli(['schedules', 'describe', 'nope'], { admin })).code, 3, 'not found');
  t.equal((await keelCli(['schedules', 'delete', 'nightly'], { admin })).code, 5, 'asks first');
  t.equal((await keelCli(['schedules', 'rm', 'nightly', '-y'], { admin })).code, 0);
  t.match((await keelCli(['schedules', 'ls'], { admin })).out, /No schedules/);
});

t.test('admin URL, unreachable server, usage errors', async (t) => {
  const keel = await startKeel(t);
  const port = await freePort();
  const dead = await keelCli(['services', 'ls'], { admin: `http://127.0.0.1:${port}` });
  t.equal(dead.code, 4);
  t.match(dead.err, new RegExp(`cannot reach the Keel admin API at http://127.0.0.1:${port}`));
  const deadJson = await keelCli(['services', 'ls', '--json'], { admin: `http://127.0.0.1:${port}` });
  t.equal(deadJson.code, 4);
  t.equal(deadJson.out, '');
  t.match(JSON.parse(deadJson.err), { error: { exit_code: 4 } });
  // --admin-url wins over KEEL_ADMIN_URL
  const flag = await keelCli(['--admin-url', keel.admin, 'services', 'ls', '--json'], { admin: `http://127.0.0.1:${port}` });
  t.equal(flag.code, 0, flag.err);
  t.same(flag.json, []);
  const after = await keelCli(['services', 'ls', '--json', '--admin-url', keel.admin]);
  t.equal(after.code, 0, 'global options after the command too');
  t.equal((await keelCli(['services', 'ls', '--admin-url', 'ftp://x'])).code, 2);
  t.equal((await keelCli(['services', 'frobnicate'], { admin: keel.admin })).code, 2);
  t.equal((await keelCli(['invocations', 'ls', '--no-such-option'], { admin: keel.admin })).code, 2);
  t.equal((await keelCli(['deployments'], { admin: keel.admin })).code, 2, 'a group without its command');
});
