// The seed's Greeter in every SDK (examples/greeter*/): registered with the real `restate` CLI,
// called through Keel's ingress, and Keel SIGKILLed during the durable sleep — "Notification"
// must not run again, "Reminder" runs once. KEEL_SDK=go (comma-separated) runs only those.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { startKeel, ingress, eventually, tempDir, query } from './helpers/keel.mjs';
import { startEndpoint, selected } from './helpers/sdks.mjs';
import { crashAndRestart, getInvocation } from './services/invocation-helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLI = path.join(here, '..', 'node_modules', '.bin', 'restate');

// Go and Rust take and give a bare JSON string, the others an object (the seed's two variants).
const GREETERS = [
  { sdk: 'ts', dir: 'examples/greeter', main: 'greeter.mjs', handler: 'greet', input: { name: 'Ada' }, output: { result: 'You said hi to Ada!' } },
  { sdk: 'go', dir: 'examples/greeter-go', handler: 'Greet', input: 'Ada', output: 'You said hi to Ada!' },
  { sdk: 'python', dir: 'examples/greeter-python', handler: 'greet', input: { name: 'Ada' }, output: { result: 'You said hi to Ada!' } },
  { sdk: 'java', dir: 'examples/greeter-java', handler: 'greet', input: { name: 'Ada' }, output: { result: 'You said hi to Ada!' } },
  { sdk: 'rust', dir: 'examples/greeter-rust', handler: 'greet', input: 'Ada', output: 'You said hi to Ada!' },
];

function restateCli(t, keel, ...args) {
  const home = tempDir(t, 'keel-cli-home-');
  return new Promise((resolve) => {
    execFile(CLI, args, {
      env: { PATH: process.env.PATH, HOME: home, RESTATE_ADMIN_URL: keel.admin, RESTATE_CLI_CONFIG_HOME: home, NO_COLOR: '1', TERM: 'dumb' },
      timeout: 60_000,
    }, (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: String(stdout) + String(stderr) }));
  });
}

for (const g of GREETERS) {
  if (!selected(g.sdk)) continue;
  t.test(`Greeter (${g.sdk}): register with the restate CLI, call, SIGKILL Keel during the sleep`, async (t) => {
    const ep = await startEndpoint(t, g.dir, { main: g.main });
    const keel = await startKeel(t);
    const reg = await restateCli(t, keel, 'deployments', 'register', ep.uri, '--yes');
    t.equal(reg.code, 0, reg.out);
    t.match(reg.out, /Greeter/);

    const direct = await ingress(keel, `/Greeter/${g.handler}`, g.input);
    t.same([direct.status, direct.body], [200, g.output], 'a call answers the greeting');
    t.equal(ep.recorded('Notification').length, 1);
    t.equal(ep.recorded('Reminder').length, 1);

    const sent = await ingress(keel, `/Greeter/${g.handler}/send`, g.input);
    t.equal(sent.status, 202);
    const id = sent.body.invocationId;
    await eventually(async () => {
      const rows = await query(keel, `SELECT entry_type FROM sys_journal WHERE id = '${id}'`);
      return rows.some((r) => r.entry_type === 'Command: Sleep');
    });
    t.equal(ep.recorded('Reminder').length, 1, 'killed during the sleep, before the reminder');
    await crashAndRestart(keel);
    const out = await getInvocation(keel, id);
    t.same([out.status, out.body], [200, g.output], 'the greeting completes after the restart');
    t.equal(ep.recorded('Notification').length, 2, '"Notification" did not run again');
    t.equal(ep.recorded('Reminder').length, 2, '"Reminder" ran once for the second greeting');
    const [first, second] = ep.recorded('Notification').map((l) => l.split(' ')[1]);
    t.not(first, second, 'each greeting has its own random UUID');
    t.equal(ep.recorded('Reminder')[1].split(' ')[1], second, 'the UUID is the same before and after the crash');
  });
}
