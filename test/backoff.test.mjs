// The crash-looping handler against a real Keel and a real SDK handler that always throws a
// retryable error (RT0007). The test process records the wall-clock time of every attempt:
// - the gaps between attempts grow exponentially (initial_interval 100ms, factor 2), after
//   max_attempts (5) the invocation is paused with retry_count 5 and no 6th attempt happens; once
//   the handler is fixed, `PATCH /invocations/{id}/resume` makes it complete;
// - max_interval caps the delay: past the cap the gaps stop growing.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { startKeel, serveServices, register, ingress, eventually } from './helpers/keel.mjs';
import { query, getInvocation, adminCall } from './services/invocation-helpers.mjs';

/** tag -> wall-clock times (ms) of the handler's attempts; tag -> whether the handler crashes. */
const attemptTimes = new Map();
const crashing = new Map();

const crashLoop = restate.service({
  name: 'CrashLoop',
  handlers: {
    run: async (_ctx, tag) => {
      if (!attemptTimes.has(tag)) attemptTimes.set(tag, []);
      attemptTimes.get(tag).push(Date.now());
      const crash = crashing.get(tag);
      if (crash === true || (crash === 'once' && attemptTimes.get(tag).length === 1)) throw new Error(`crash loop ${tag}`);
      return `recovered ${tag}`;
    },
  },
});

const gapsOf = (tag) => {
  const times = attemptTimes.get(tag) ?? [];
  return times.slice(1).map((x, i) => x - times[i]);
};

async function row(keel, id) {
  const rows = await query(keel, `select status, retry_count, last_failure_error_code from sys_invocation where id = '${id}'`);
  return rows[0];
}

async function start(t, env, tag) {
  const keel = await startKeel(t, { env });
  await register(keel, await serveServices(t, [crashLoop]));
  // Warm-up: one invocation that fails once and then succeeds takes Keel's failure and retry
  // paths through their first (cold, slower) run, so the measured gaps show the backoff.
  crashing.set(`${tag}-warm-up`, 'once');
  const warm = await ingress(keel, '/CrashLoop/run', `${tag}-warm-up`);
  t.equal(warm.status, 200, `warm-up: ${JSON.stringify(warm.body)}`);
  crashing.set(tag, true);
  const sent = await ingress(keel, '/CrashLoop/run/send', tag);
  t.equal(sent.status, 202, JSON.stringify(sent.body));
  return { keel, id: sent.body.invocationId };
}

t.test('crash loop: backoff doubles, pauses after max_attempts, resumes once fixed', async (t) => {
  const tag = 'grow';
  const { keel, id } = await start(
    t,
    {
      KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '100ms',
      KEEL_DEFAULT_RETRY_POLICY__EXPONENTIATION_FACTOR: '2',
      KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '5',
      KEEL_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS: 'pause',
    },
    tag,
  );

  const paused = await eventually(async () => {
    const r = await row(keel, id);
    return r?.status === 'paused' && r;
  });
  t.equal(attemptTimes.get(tag).length, 5, 'exactly 5 attempts before the pause');
  t.equal(Number(paused.retry_count), 5, 'retry_count 5');
  t.equal(paused.last_failure_error_code, 'RT0007', 'the handler failure is retryable (RT0007)');

  const gaps = gapsOf(tag);
  t.equal(gaps.length, 4);
  t.comment(`gaps between attempts (ms): ${gaps.join(', ')}`);
  // Each gap is the configured delay 100·2^i plus the per-attempt overhead. Never early: that
  // is what proves the doubling. The upper bound only rules out a far later schedule (the next
  // doubling), so a loaded machine does not make it flaky.
  for (const [i, g] of gaps.entries()) {
    const delay = 100 * 2 ** i;
    t.ok(g >= delay - 5 && g < 2 * delay, `gap ${i} (${g} ms) ≈ the ${delay} ms backoff`);
  }

  // Paused: no 6th attempt, even well after the next backoff would have been due (1600 ms).
  await new Promise((r) => setTimeout(r, 2000));
  t.equal(attemptTimes.get(tag).length, 5, 'no 6th attempt while paused');
  t.equal((await row(keel, id)).status, 'paused');

  // Fix the handler and resume: the invocation completes.
  crashing.set(tag, false);
  const res = await adminCall(keel, 'PATCH', `/invocations/${id}/resume`);
  t.ok(res.status < 300, `resume: ${res.status} ${res.text}`);
  const out = await eventually(async () => {
    const o = await getInvocation(keel, id, 'output');
    return o.status === 200 && o;
  });
  t.equal(out.body, `recovered ${tag}`);
  t.equal(attemptTimes.get(tag).length, 6, 'one more attempt, after the resume');
  t.equal((await row(keel, id)).status, 'completed');
  t.equal(keel.proc.exitCode, null, 'Keel still running');
});

t.test('crash loop: max_interval caps the delay', async (t) => {
  const tag = 'cap';
  const { keel, id } = await start(
    t,
    {
      KEEL_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL: '50ms',
      KEEL_DEFAULT_RETRY_POLICY__EXPONENTIATION_FACTOR: '2',
      KEEL_DEFAULT_RETRY_POLICY__MAX_INTERVAL: '300ms',
      KEEL_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS: '9',
      KEEL_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS: 'pause',
    },
    tag,
  );
  // Delays: 50, 100, 200, then capped at 300 (instead of 400, 800, 1600, 3200, 6400).
  await eventually(async () => (await row(keel, id))?.status === 'paused', { timeout_ms: 20_000 });
  t.equal(attemptTimes.get(tag).length, 9);
  const gaps = gapsOf(tag);
  t.comment(`gaps between attempts (ms): ${gaps.join(', ')}`);
  for (const [i, delay] of [50, 100, 200].entries()) {
    t.ok(gaps[i] >= delay - 5 && gaps[i] < 2 * delay + 50, `gap ${i} (${gaps[i]} ms) ≈ the ${delay} ms backoff below the cap`);
  }
  const capped = gaps.slice(3);
  t.equal(capped.length, 5);
  // Uncapped they would be 400, 800, 1600, 3200, 6400 ms.
  for (const [i, g] of capped.entries()) {
    t.ok(g >= 295 && g < 600, `gap ${i + 3} stays at the 300 ms cap (${g} ms)`);
  }
  const total = capped.reduce((a, b) => a + b, 0);
  t.ok(total < 2500, `uncapped these delays would sum to 12.4 s; capped: ${total} ms`);
});
