// The replay check (Keel's own, P14): suspended invocations of a real TypeScript SDK service are
// replayed against new code swapped in behind the URI they are pinned to, before it takes them
// over. Unchanged code replays compatible; code with a step added before the awaited sleep is
// reported at its first differing entry; code that lacks the handler is a mismatch; a
// registration asked to refuse refuses. The new code's side effects are counted in its own
// closures: a replay must run none. Invocations that are not suspended (retrying ones here) are
// counted, never replayed; at a new URI nothing is pinned, so nothing is replayed.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { adminCall, eventually, ingress, query, register, serveHandler, serveServices, startKeel } from './helpers/keel.mjs';
import { keelCli } from './helpers/keel-cli.mjs';
import { launch, newPage } from './helpers/browser.mjs';

const SUSPENDED = 3;
/** Side effects each variant's closures ran, by variant. */
const effects = { v1: 0, same: 0, changed: 0, later: 0, between: 0 };

/** The service as v1 has it; `before` runs before the first step, `after` after the sleep. */
function flow(variant, { before, after } = {}) {
  return restate.service({
    name: 'Flow',
    handlers: {
      run: async (ctx, n) => {
        if (before) await before(ctx);
        const a = await ctx.run('step-a', () => {
          effects[variant] += 1;
          return n * 2;
        });
        await ctx.sleep(3_600_000);
        if (after) await after(ctx);
        return a;
      },
      flaky: async () => {
        throw new Error('always failing: retried, never suspended');
      },
    },
  });
}

/** One URI whose code can be swapped, as a redeploy behind the same address does. */
async function swappableEndpoint(t, services) {
  let handler = restate.createEndpointHandler({ services });
  const uri = await serveHandler(t, (req, res) => handler(req, res));
  return { uri, use: (next) => (handler = restate.createEndpointHandler({ services: next })) };
}

t.test('replay check against real SDK code: compatible, mismatch, missing handler, refusal, no side effects', async (t) => {
  const keel = await startKeel(t, { env: { KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: '100ms' } });
  const endpoint = await swappableEndpoint(t, [flow('v1')]);
  const uri = endpoint.uri;
  await register(keel, uri);
  for (let i = 0; i < SUSPENDED; i++) t.equal((await ingress(keel, '/Flow/run/send', i)).status, 202);
  await ingress(keel, '/Flow/flaky/send', null);
  await eventually(async () => Number((await query(keel, "SELECT count(*) AS n FROM sys_invocation WHERE status = 'suspended'"))[0].n) === SUSPENDED);
  t.equal(effects.v1, SUSPENDED, 'v1 ran its step once per invocation');

  const same = [flow('same')];
  const changed = [flow('changed', { before: (ctx) => ctx.sleep(10) })];
  const later = [flow('later', { after: (ctx) => ctx.run('step-b', () => (effects.later += 1)) })];
  const lacking = [restate.service({ name: 'Flow', handlers: { flaky: async () => 'ok' } })];

  await t.test('unchanged code, and a step added after the awaited sleep: every replay compatible', async (t) => {
    for (const [code, name] of [[same, 'same'], [later, 'later']]) {
      endpoint.use(code);
      const r = await adminCall(keel, 'POST', '/deployments/replay-check', { uri, ...(name === 'later' ? { sample: 'all' } : {}) });
      t.equal(r.status, 200, r.text);
      t.match(r.json, { suspended: SUSPENDED, checked: SUSPENDED, compatible: SUSPENDED, mismatched: 0, failed: 0, passed: true }, name);
      t.ok(r.json.invocations.every((v) => v.verdict === 'compatible' && v.ended === 'suspended' && v.target === 'Flow/run'), `${name}: each suspends on the recorded sleep`);
      t.ok((r.json.not_replayed.running ?? 0) + (r.json.not_replayed['backing-off'] ?? 0) >= 1, `${name}: the retrying invocation is counted, not replayed: ${JSON.stringify(r.json.not_replayed)}`);
    }
    t.equal(effects.same + effects.later, 0, 'no closure of the new code ran');
  });

  await t.test('a step added before the sleep: the first differing entry, recorded and new side by side', async (t) => {
    endpoint.use(changed);
    const r = await adminCall(keel, 'POST', '/deployments/replay-check', { uri, sample: 2 });
    t.equal(r.status, 200, r.text);
    t.match(r.json, { suspended: SUSPENDED, checked: 2, compatible: 0, mismatched: 2, passed: false });
    for (const v of r.json.invocations) {
      t.match(v, { verdict: 'mismatch', error_code: 'RT0016', recorded: { index: 1, command: 1, type: 'Command: Run' }, new: { command: 1 } });
      t.ok(v.message.length > 0, `the SDK's own words: ${v.message.slice(0, 160)}`);
    }
    t.equal(effects.changed, 0, 'no closure of the changed code ran');
  });

  await t.test('the new code lacks the handler an invocation runs: a mismatch naming it', async (t) => {
    endpoint.use(lacking);
    const r = await adminCall(keel, 'POST', '/deployments/replay-check', { uri });
    t.equal(r.status, 200, r.text);
    t.match(r.json, { checked: SUSPENDED, mismatched: SUSPENDED, passed: false });
    t.match(r.json.invocations[0], { verdict: 'mismatch', error_code: 'RT0018', message: /no handler Flow\/run/ });
  });

  await t.test('the limit the README states: a step added between a journaled sleep and its await runs in the SDK', async (t) => {
    const between = restate.service({
      name: 'Flow',
      handlers: {
        run: async (ctx, n) => {
          const a = await ctx.run('step-a', () => n * 2);
          const nap = ctx.sleep(3_600_000);
          await ctx.run('step-between', () => (effects.between += 1));
          await nap;
          return a;
        },
        flaky: async () => 'ok',
      },
    });
    endpoint.use([between]);
    const r = await adminCall(keel, 'POST', '/deployments/replay-check', { uri, sample: 1 });
    t.match(r.json, { checked: 1, compatible: 1, passed: true });
    t.match(r.json.invocations[0], { ended: 'new-command', next: { index: 4, type: 'Command: Run' } }, 'reported as the next command past the journal');
    t.equal(effects.between, 1, 'its closure ran once, in the SDK, before its command reached Keel: this change is not side-effect free');
  });

  await t.test('registration with replay_check: refused on a mismatch (KEEL1002, nothing registered), accepted with the report otherwise', async (t) => {
    const before = (await adminCall(keel, 'GET', '/deployments')).json.deployments;
    endpoint.use(lacking);
    const refused = await adminCall(keel, 'POST', '/deployments', { uri, force: true, replay_check: { refuse_on_mismatch: true } });
    t.equal(refused.status, 409, refused.text);
    t.match(refused.json, { restate_code: 'KEEL1002', message: /did not pass: 3 of 3 suspended invocations mismatch/ });
    t.same((await adminCall(keel, 'GET', '/deployments')).json.deployments, before, 'nothing was registered or replaced');
    endpoint.use(same);
    const accepted = await adminCall(keel, 'POST', '/deployments', { uri, replay_check: { sample: 1, refuse_on_mismatch: true } });
    t.equal(accepted.status, 200, accepted.text);
    t.match(accepted.json.replay_check, { checked: 1, compatible: 1, passed: true, deployment: { replaces: before[0].id } });
    const bad = await adminCall(keel, 'POST', '/deployments/replay-check', { uri, sample: 0 });
    t.equal(bad.status, 400, 'a sample under 1 is refused');
    t.equal((await adminCall(keel, 'POST', '/deployments/replay-check', { uri, sample: 'some' })).status, 400, 'a word other than all is refused');
    t.match(bad.json.message, /sample/);
    const elsewhere = await serveServices(t, changed);
    const fresh = await adminCall(keel, 'POST', '/deployments/replay-check', { uri: elsewhere });
    t.match(fresh.json, { suspended: 0, checked: 0, passed: true }, 'at a new URI nothing in flight is pinned: nothing to replay');
    t.notOk('replaces' in fresh.json.deployment);
  });

  await t.test('keel deployments check: the table, and exit 1 when a replay mismatches', async (t) => {
    endpoint.use(later);
    const ok = await keelCli(['deployments', 'check', uri], { admin: keel.admin });
    t.equal(ok.code, 0, ok.err);
    t.match(ok.out, /Replayed 3 of 3 suspended invocation\(s\) of Flow/);
    t.match(ok.out, /All 3 replayed unchanged/);
    endpoint.use(changed);
    const bad = await keelCli(['deployments', 'check', uri, '--sample', '1'], { admin: keel.admin });
    t.equal(bad.code, 1);
    t.match(bad.out, /MISMATCH/);
    t.match(bad.out, /#1 Command: Run/);
    t.match(bad.err, /did not pass/);
    const refused = await keelCli(['deployments', 'register', uri, '--check', '--yes'], { admin: keel.admin });
    t.equal(refused.code, 1, 'register --check refuses');
    t.match(refused.err, /KEEL1002|did not pass/);
  });

  await t.test('the UI register page shows the report before the registration is confirmed', async (t) => {
    const { page, problems } = await newPage(await launch(t), t);
    await page.goto(`${keel.admin}/ui/register`);
    endpoint.use(changed);
    await page.locator('input[name=uri]').fill(uri);
    await page.locator('input[name=replay_check]').check();
    await page.getByRole('button', { name: 'Preview (dry run)' }).click();
    const report = page.locator('#replay-report');
    await report.waitFor();
    const text = await report.innerText();
    t.match(text, /3 mismatch\(es\) and 0 failed replay\(s\) among 3/);
    t.match(text, /#1 Command: Run/);
    t.equal(await page.locator('#replay-report tr.replay-mismatch').count(), SUSPENDED, 'a row per replayed invocation');
    t.match(await page.locator('#register-confirm').innerText(), /Register anyway/, 'confirming is a choice made against the report');
    t.same(problems, []);
  });

  t.equal(effects.same + effects.changed + effects.later, 0, 'over every other replay, no side effect of new code');
  const still = await query(keel, "SELECT count(*) AS n FROM sys_invocation WHERE status = 'suspended'");
  t.equal(Number(still[0].n), SUSPENDED, 'the replayed invocations are still suspended, untouched');
});
