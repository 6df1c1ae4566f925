// Per-handler options from the manifest (retry policy, inactivity and abort timeouts, workflow
// retention) and named signals between invocations, with real SDK services on a real Keel.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { query } from './services/invocation-helpers.mjs';

const attempts = new Map();
const bump = (k) => attempts.set(k, (attempts.get(k) ?? 0) + 1);
const published = new Map();

const options = restate.service({
  name: 'Options',
  handlers: {
    failKill: restate.handlers.handler(
      { retryPolicy: { maxAttempts: 2, onMaxAttempts: 'kill', initialInterval: 10 } },
      async (ctx, tag) => {
        bump(`kill:${tag}`);
        throw new Error(`boom ${tag}`);
      },
    ),
    failPause: restate.handlers.handler(
      { retryPolicy: { maxAttempts: 3, onMaxAttempts: 'pause', initialInterval: 10 } },
      async (ctx, tag) => {
        bump(`pause:${tag}`);
        throw new Error(`boom ${tag}`);
      },
    ),
    // Two steps under a policy of 3 attempts: the first fails twice, then succeeds; the second
    // always fails. Each step has the 3 attempts to itself (Keel's own; Restate counts them
    // together, restatedev/restate#4462, and would pause at the second step's first failure).
    twoSteps: restate.handlers.handler(
      { retryPolicy: { maxAttempts: 3, onMaxAttempts: 'pause', initialInterval: 10 } },
      async (ctx, tag) => {
        await ctx.run('flaky first', () => {
          if (bump(`first:${tag}`).get(`first:${tag}`) < 3) throw new Error(`first fails`);
        });
        await ctx.run('second', () => {
          bump(`second:${tag}`);
          throw new Error(`second fails ${tag}`);
        });
        return 'unreachable';
      },
    ),
    nap: restate.handlers.handler({ inactivityTimeout: 100 }, async (ctx, ms) => {
      await ctx.sleep(ms);
      return 'rested';
    }),
    chatty: restate.handlers.handler({ inactivityTimeout: 200 }, async (ctx, tag) => {
      bump(`chatty:${tag}`);
      // Six steps of 80 ms: 480 ms in all, but never 200 ms without a message to Keel.
      for (let i = 0; i < 6; i++) await ctx.run(`step-${i}`, () => new Promise((r) => setTimeout(() => r(i), 80)));
      return 'talked';
    }),
    stuck: restate.handlers.handler({ inactivityTimeout: 100, abortTimeout: 200 }, async (ctx, tag) => {
      bump(`stuck:${tag}`);
      // A step that never finishes: the endpoint stays silent until Keel aborts the attempt.
      await ctx.run('forever', () => new Promise(() => {}));
      return 'unreachable';
    }),
    awaitSignal: async (ctx, tag) => {
      await ctx.run('publish', () => void published.set(tag, ctx.request().id));
      const approved = await ctx.signal('approved');
      return `approved=${approved}`;
    },
    sendSignal: async (ctx, { id, value }) => {
      ctx.invocation(id).signal('approved').resolve(value);
      return 'sent';
    },
  },
});

const onboarding = restate.workflow({
  name: 'Onboarding',
  options: { workflowRetention: 1000 },
  handlers: {
    run: async (ctx, name) => {
      bump(`wf:${ctx.key}`);
      return `welcome ${name}`;
    },
  },
});

async function setup(t, env = {}) {
  const keel = await startKeel(t, { env: { KEEL_WORKER__PARTITIONS: '4', ...env } });
  await register(keel, await serveServices(t, [options, onboarding]));
  return keel;
}

const statusOf = async (keel, id) => (await query(keel, `select status, retry_count, last_failure from sys_invocation where id = '${id}'`))[0];

t.test('retry policy from the manifest: kill after maxAttempts answers with the failure', async (t) => {
  const keel = await setup(t);
  const r = await ingress(keel, '/Options/failKill', 'k1');
  t.equal(r.status, 500);
  t.match(r.body.message, /boom k1/);
  t.equal(attempts.get('kill:k1'), 2, 'two attempts in all, then killed (the server default would retry 70 times)');
});

t.test('retry policy from the manifest: pause after maxAttempts', async (t) => {
  const keel = await setup(t);
  const sent = await ingress(keel, '/Options/failPause/send', 'p1');
  const id = sent.body.invocationId;
  const row = await eventually(async () => {
    const r = await statusOf(keel, id);
    return r?.status === 'paused' ? r : undefined;
  });
  t.equal(row.retry_count, 3);
  t.match(row.last_failure, /boom p1/);
  t.equal(attempts.get('pause:p1'), 3);
});

t.test("retry policy per step: a flaky first step leaves the second its own attempts; the pause names the step", async (t) => {
  const keel = await setup(t);
  const id = (await ingress(keel, '/Options/twoSteps/send', 's1')).body.invocationId;
  const row = await eventually(async () => {
    const r = (await query(keel, `select status, retry_count, last_failure, last_failure_related_command_name as step from sys_invocation where id = '${id}'`))[0];
    return r?.status === 'paused' ? r : undefined;
  });
  t.equal(attempts.get('first:s1'), 3, 'the first step ran until it succeeded (2 failures)');
  t.equal(attempts.get('second:s1'), 3, 'the second step had all 3 attempts of the policy');
  t.equal(row.retry_count, 5, 'five failed attempts in all, more than the policy allows one step');
  t.match(row.last_failure, /second fails s1/);
  t.equal(row.step, 'second', 'paused naming the step whose attempts ran out');
  const steps = await query(keel, `select name, attempts from sys_journal where id = '${id}' and entry_type = 'Command: Run' order by index`);
  t.same(steps.map((r) => [r.name, Number(r.attempts)]), [['flaky first', 3], ['second', 3]], 'sys_journal shows the attempts of each step');
});

t.test('inactivity timeout from the manifest: a sleeping handler suspends instead of holding its stream', async (t) => {
  const keel = await setup(t);
  const sent = await ingress(keel, '/Options/nap/send', 1500);
  const id = sent.body.invocationId;
  await eventually(async () => (await statusOf(keel, id))?.status === 'suspended');
  const out = await eventually(async () => {
    const r = await fetch(`${keel.ingress}/restate/invocation/${id}/output`);
    return r.status === 200 ? r.json() : undefined;
  });
  t.equal(out, 'rested');
});

t.test('inactivity timeout: every message restarts it, so an attempt longer than it but never silent that long is not suspended', async (t) => {
  const keel = await setup(t);
  const r = await ingress(keel, '/Options/chatty', 'c1');
  t.equal(r.status, 200);
  t.equal(r.body, 'talked');
  t.equal(attempts.get('chatty:c1'), 1, 'one attempt: no suspension, no replay');
});

t.test('abort timeout from the manifest: a silent attempt is aborted with RT0001 and retried', async (t) => {
  const keel = await setup(t, { KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms' });
  const sent = await ingress(keel, '/Options/stuck/send', 's1');
  const id = sent.body.invocationId;
  await eventually(() => /RT0001/.test(keel.logs()) && attempts.get('stuck:s1') >= 2);
  const row = await statusOf(keel, id);
  t.not(row.status, 'completed');
  t.match(row.last_failure, /RT0001/);
  await fetch(`${keel.admin}/invocations/${id}/kill`, { method: 'PATCH' });
});

t.test('named signals between invocations, streaming and always suspending', async (t) => {
  for (const inactivity of ['1m', '0s']) {
    const keel = await setup(t, { KEEL_WORKER__INVOKER__INACTIVITY_TIMEOUT: inactivity });
    const tag = `sig-${inactivity}`;
    const waiting = ingress(keel, '/Options/awaitSignal', tag);
    const id = await eventually(() => published.get(tag));
    t.equal((await ingress(keel, '/Options/sendSignal', { id, value: true })).body, 'sent');
    const r = await waiting;
    t.equal(r.status, 200, `inactivity ${inactivity}`);
    t.equal(r.body, 'approved=true');
  }
});

t.test('workflow completion retention from the manifest: the run is forgotten after it, then runs again', async (t) => {
  const keel = await setup(t, { KEEL_WORKER__CLEANUP_INTERVAL: '200ms' });
  t.equal((await ingress(keel, '/Onboarding/w1/run', 'ada')).body, 'welcome ada');
  t.equal((await ingress(keel, '/Onboarding/w1/run', 'ada')).status, 409, 'kept while retained');
  let seen = '';
  await eventually(async () => {
    const r = await fetch(`${keel.ingress}/restate/workflow/Onboarding/w1/output`);
    seen = `${r.status} ${await r.text()}`;
    return r.status === 404;
  }).catch((err) => t.fail(`still answered ${seen}: ${err.message}`));
  t.equal((await ingress(keel, '/Onboarding/w1/run', 'bob')).body, 'welcome bob');
  t.equal(attempts.get('wf:w1'), 2);
});
