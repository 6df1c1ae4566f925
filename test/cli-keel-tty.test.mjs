// The `keel` CLI in a real terminal (tmux): the spinner while discovery runs, the confirmation
// prompts answered from the keyboard (yes, no, Ctrl-C), colours on the terminal, none with
// NO_COLOR or when stdout is piped (while stderr, still the terminal, keeps its colours).
import t from 'tap';
import http2 from 'node:http2';
import * as restate from '@restatedev/restate-sdk';
import { adminCall, eventually, ingress, query, register, serveServices, startKeel } from './helpers/keel.mjs';
import { bin, cliNode, tmuxShell } from './helpers/keel-cli.mjs';

const SGR = /\x1b\[[0-9;]*m/;
const SPINNER_FRAME = /[◒◐◓◑•o]\s+Discovering http/;

const sleepy = restate.service({
  name: 'Sleepy',
  handlers: {
    nap: async (ctx) => {
      await ctx.sleep(3_600_000);
      return 'late';
    },
  },
});

const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, d) => {
      const v = ((await ctx.get('count')) ?? 0) + d;
      ctx.set('count', v);
      return v;
    },
  },
});

/** An SDK endpoint whose discovery answers only after `delay_ms`: long enough to see the spinner. */
async function slowDiscovery(t, services, delay_ms) {
  const handler = restate.createEndpointHandler({ services });
  const server = http2.createServer((req, res) => {
    if (req.url.startsWith('/discover')) setTimeout(() => handler(req, res), delay_ms);
    else handler(req, res);
  });
  const sessions = new Set();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => (sessions.forEach((s) => s.destroy()), server.close(() => r()))));
  return `http://127.0.0.1:${server.address().port}/`;
}

async function statusOf(keel, id) {
  return (await query(keel, `SELECT status FROM sys_invocation WHERE id = '${id}'`))[0]?.status;
}

/**
 * A shell with `keel` defined. `step(line)` runs one command line after a marker line;
 * `waitFor` and `exit` then look only at what the terminal shows after that marker.
 */
async function shellFor(t, keel, env = {}) {
  const sh = await tmuxShell(t, { KEEL_ADMIN_URL: keel.admin, ...env });
  sh.run(`keel() { ${cliNode} ${bin} "$@"; }`);
  let n = 0;
  const rawWait = sh.waitFor;
  sh.step = async (line) => {
    n += 1;
    sh.run(`echo "==step ${n}=="; ${line}; echo EXIT=$?`);
  };
  sh.waitFor = async (re, opts = {}) => {
    const marker = new RegExp(`^(?:\\x1b\\[[0-9;]*m)*==step ${n}==\\s*$`, 'm');
    const after = (screen) => {
      const m = marker.exec(screen);
      return m ? screen.slice(m.index + m[0].length) : '';
    };
    const matched = { test: (screen) => re.test(after(screen)) };
    return after(await rawWait(matched, opts));
  };
  sh.exit = async (opts) => {
    const exit = /^(?:\x1b\[[0-9;]*m)*EXIT=(\d+)\s*$/m;
    const s = await sh.waitFor(exit, opts);
    return { screen: s, code: Number(exit.exec(s)[1]) };
  };
  return sh;
}

t.test('register: spinner during discovery, then the plan and a prompt answered yes', async (t) => {
  const keel = await startKeel(t);
  const uri = await slowDiscovery(t, [sleepy, counter], 5000);
  const sh = await shellFor(t, keel);
  await sh.step(`keel deployments register ${uri}`);
  const spinning = await sh.waitFor(SPINNER_FRAME, { timeout_ms: 4500 });
  t.notMatch(spinning, /Register/, 'the prompt waits for discovery');
  const prompt = await sh.waitFor(/Register http:\/\/127\.0\.0\.1:\d+\/ \(2 services\)\?/);
  t.match(prompt, /Discovered 2 service\(s\)/, 'the spinner ends with what it found');
  t.match(prompt, /Sleepy\s+Service\s+new service\s+\+nap/);
  t.match(prompt, /Yes \/ ● No|Yes \/ No/, 'a yes/no prompt, no by default');
  t.equal((await adminCall(keel, 'GET', '/deployments')).json.deployments.length, 0, 'nothing registered while it asks');
  sh.keys('y');
  const done = await sh.exit();
  t.equal(done.code, 0, done.screen);
  t.match(done.screen, /Registered deployment dp_/);
  t.equal((await adminCall(keel, 'GET', '/deployments')).json.deployments.length, 1);
});

t.test('bulk kill: the count, a prompt; no and Ctrl-C change nothing (exit 5), yes kills', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [sleepy, counter]));
  const ids = [];
  for (let i = 0; i < 4; i++) ids.push((await ingress(keel, '/Sleepy/nap/send', null)).body.invocationId);
  await eventually(async () => (await Promise.all(ids.map((id) => statusOf(keel, id)))).every((s) => s === 'running'));
  const sh = await shellFor(t, keel);

  await sh.step('keel invocations kill --service Sleepy');
  let s = await sh.waitFor(/Kill 4 invocations\?/);
  t.equal(s.split('\n').filter((l) => l.includes('Sleepy/nap')).length, 4, 'the four listed before the question');
  sh.keys('n');
  let r = await sh.exit();
  t.equal(r.code, 5, r.screen);
  t.match(r.screen, /aborted: nothing was changed/);

  await sh.step('keel invocations kill --service Sleepy');
  await sh.waitFor(/Kill 4 invocations\?/);
  sh.keys('C-c');
  r = await sh.exit();
  t.equal(r.code, 5, r.screen);
  t.same(new Set(await Promise.all(ids.map((id) => statusOf(keel, id)))), new Set(['running']), 'nothing killed');

  await sh.step('keel invocations kill --service Sleepy --limit 3');
  s = await sh.waitFor(/Kill 3 invocations\?/);
  t.match(s, /4 invocations match; this run acts on the oldest 3/);
  sh.keys('y');
  r = await sh.exit();
  t.equal(r.code, 0, r.screen);
  t.match(r.screen, /Killed 3 invocations\./);
  await eventually(async () => (await Promise.all(ids.map((id) => statusOf(keel, id)))).filter((s) => s === 'completed').length === 3);

  await sh.step('keel invocations kill --service Sleepy --yes');
  r = await sh.exit();
  t.equal(r.code, 0, r.screen);
  t.notMatch(r.screen, /Kill 1 invocation\?/, '--yes does not ask');
  t.match(r.screen, /Killed 1 invocation/);
});

t.test('state set asks on the terminal', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [counter]));
  await ingress(keel, '/Counter/c1/add', 5);
  const sh = await shellFor(t, keel);
  await sh.step('keel state set Counter c1 count 7');
  const s = await sh.waitFor(/Set state 'count' of Counter\/c1\?/);
  t.match(s, /Counter\/c1 count: 5 → 7/);
  sh.keys('y');
  const r = await sh.exit();
  t.equal(r.code, 0, r.screen);
  t.equal((await ingress(keel, '/Counter/c1/add', 0)).body, 7);
});

t.test('colours on the terminal only', async (t) => {
  const keel = await startKeel(t);
  await register(keel, await serveServices(t, [sleepy]));
  const id = (await ingress(keel, '/Sleepy/nap/send', null)).body.invocationId;
  await eventually(async () => (await statusOf(keel, id)) === 'running');

  const sh = await shellFor(t, keel);
  await sh.step('keel invocations ls');
  let r = await sh.exit({ escapes: true });
  t.equal(r.code, 0);
  t.match(r.screen, /\x1b\[[0-9;]*36mrunning/, 'the status in cyan');
  t.match(r.screen, /\x1b\[[0-9;]*1mID/, 'headers in bold');

  await sh.step('keel invocations ls | cat');
  r = await sh.exit({ escapes: true });
  t.match(r.screen, /running/);
  t.notMatch(r.screen, SGR, 'stdout piped: no colours');

  await sh.step('keel services describe NoSuch | cat');
  r = await sh.exit({ escapes: true });
  t.equal(r.code, 0, 'the exit code of cat');
  t.match(r.screen, /\x1b\[[0-9;]*31m.*error/, 'stderr is still the terminal: the error in red');

  const plain = await shellFor(t, keel, { NO_COLOR: '1' });
  await plain.step('keel invocations ls; keel services describe NoSuch');
  r = await plain.exit({ escapes: true });
  t.match(r.screen, /running/);
  t.match(r.screen, /error\[KEEL0004\]: The requested service 'NoSuch' does not exist/);
  t.notMatch(r.screen, SGR, 'NO_COLOR: no colours at all');

  await plain.step('keel invocations kill --service Sleepy');
  const s = await plain.waitFor(/Kill 1 invocation\?/, { escapes: true });
  t.notMatch(s, SGR, 'NO_COLOR: the prompt has no colours either');
  plain.keys('n');
  r = await plain.exit();
  t.equal(r.code, 5);

  await sh.step('keel invocations ls --no-color');
  r = await sh.exit({ escapes: true });
  t.match(r.screen, /running/);
  t.notMatch(r.screen, SGR, '--no-color');
});
