// SDK services for test/conformance.test.mjs: the sdk-test-suite scenarios (sleeps, run flush and
// retries, state, user errors, non-determinism, kill), written for Keel's tests.
import * as restate from '@restatedev/restate-sdk';
import { record, bumpAttempt } from './invocation-helpers.mjs';

const { RestatePromise, TerminalError } = restate;

export const sleeper = restate.service({
  name: 'Sleeper',
  handlers: {
    // Many concurrent sleeps: returns the durations in the order the sleeps woke up.
    manySleeps: async (ctx, durations) => {
      let pending = durations.map((d, i) => ctx.sleep(d).map(() => i));
      const order = [];
      const left = new Set(durations.map((_, i) => i));
      while (left.size > 0) {
        const i = await RestatePromise.race([...left].map((j) => pending[j]));
        left.delete(i);
        order.push(durations[i]);
      }
      return order;
    },
    sleepThenRecord: async (ctx, { tag, ms }) => {
      await ctx.run('started', () => record(tag, Date.now()));
      await ctx.sleep(ms);
      record(`woke:${tag}`, Date.now());
      return `woke ${tag}`;
    },
  },
});

export const runner = restate.service({
  name: 'Runner',
  handlers: {
    // Fails twice, succeeds the third time; the handler then fails once more (forcing a replay)
    // and the run body must not run again.
    retry: async (ctx, tag) => {
      const n = await ctx.run(
        'flaky',
        () => {
          const k = bumpAttempt(`runbody:${tag}`);
          if (k < 3) throw new Error(`run fails ${k}`);
          return k;
        },
        { maxRetryAttempts: 3, initialRetryInterval: 10 },
      );
      if (bumpAttempt(`runhandler:${tag}`) === 1) throw new Error('force a replay after the run');
      return n;
    },
    exhausted: async (ctx, tag) => {
      try {
        await ctx.run(
          'always fails',
          () => {
            const k = bumpAttempt(`runbody:${tag}`);
            throw new Error(`run always fails ${k}`);
          },
          { maxRetryAttempts: 2, initialRetryInterval: 10 },
        );
        return 'unexpected';
      } catch (e) {
        return { terminal: e instanceof TerminalError, message: e.message };
      }
    },
    // Two steps: the first fails twice before it succeeds, the second always fails with 3 tries
    // of its own. The first step's failures must not count against the second's budget.
    twoSteps: async (ctx, tag) => {
      await ctx.run('flaky first', () => {
        const k = bumpAttempt(`first:${tag}`);
        if (k < 3) throw new Error(`first fails ${k}`);
      });
      try {
        await ctx.run(
          'second always fails',
          () => {
            throw new Error(`second fails ${bumpAttempt(`second:${tag}`)}`);
          },
          { maxRetryAttempts: 3, initialRetryInterval: 10 },
        );
        return 'unexpected';
      } catch (e) {
        return { terminal: e instanceof TerminalError, message: e.message };
      }
    },
    // RunFlush: counts run bodies executed in *this* attempt.
    countSideEffects: async (ctx, n) => {
      let count = 0;
      for (let i = 0; i < n; i++) await ctx.run(`inc ${i}`, () => void count++);
      return count;
    },
  },
});

export const stateObj = restate.object({
  name: 'StateObj',
  handlers: {
    add: async (ctx, n) => {
      const next = ((await ctx.get('count')) ?? 0) + n;
      ctx.set('count', next);
      return next;
    },
    get: restate.handlers.object.shared(async (ctx) => ctx.get('count')),
    setMany: async (ctx, entries) => {
      for (const [k, v] of Object.entries(entries)) ctx.set(k, v);
      return (await ctx.stateKeys()).sort();
    },
    keys: restate.handlers.object.shared(async (ctx) => (await ctx.stateKeys()).sort()),
    read: restate.handlers.object.shared(async (ctx, k) => ctx.get(k)),
    clearAll: async (ctx) => {
      ctx.clearAll();
      return (await ctx.stateKeys()).sort();
    },
    failAfterSet: async (ctx, v) => {
      ctx.set('v', v);
      throw new TerminalError(`failed after setting ${v}`, { errorCode: 400 });
    },
    retryThenSucceed: async (ctx, tag) => {
      const n = bumpAttempt(`eventual:${tag}`);
      if (n < 3) throw new Error(`retryable failure ${n}`);
      ctx.set('attempt', n);
      return n;
    },
  },
});

export const stateProxy = restate.service({
  name: 'StateProxy',
  handlers: {
    addVia: async (ctx, { key, n }) => ctx.objectClient(stateObj, key).add(n),
    keysVia: async (ctx, key) => ctx.objectClient(stateObj, key).keys(),
  },
});

export const errors = restate.service({
  name: 'Errors',
  handlers: {
    terminalWithMetadata: async (_ctx, { code, message, metadata }) => {
      throw new TerminalError(message, { errorCode: code, metadata });
    },
    propagate: async (ctx, req) => ctx.serviceClient(errors).terminalWithMetadata(req),
  },
});

// Non-determinism: the first attempt issues one command, every later attempt another one at the
// same journal index.
async function nonDet(ctx, name, first, later) {
  const n = bumpAttempt(`nondet:${name}:${ctx.key}`);
  if (n === 1) await first();
  else await later();
  await ctx.sleep(20);
  if (n === 1) throw new Error('force a replay');
  ctx.objectSendClient(stateObj, ctx.key).add(1);
  return 'should never complete';
}

export const nonDeterministic = restate.object({
  name: 'NonDeterministic',
  handlers: {
    eitherSleepOrCall: async (ctx) =>
      nonDet(ctx, 'sleepOrCall', () => ctx.sleep(10), () => ctx.objectClient(stateObj, ctx.key).get()),
    callDifferentMethod: async (ctx) =>
      nonDet(ctx, 'callDifferent', () => ctx.objectClient(stateObj, ctx.key).get(), () => ctx.objectClient(stateObj, ctx.key).keys()),
    backgroundInvokeWithDifferentTargets: async (ctx) =>
      nonDet(
        ctx,
        'sendDifferent',
        async () => void ctx.objectSendClient(stateObj, ctx.key).get(),
        async () => void ctx.objectSendClient(stateObj, ctx.key).keys(),
      ),
    setDifferentKey: async (ctx) =>
      nonDet(ctx, 'setDifferent', async () => ctx.set('a', 1), async () => ctx.set('b', 2)),
  },
});

export const conformanceServices = [sleeper, runner, stateObj, stateProxy, errors, nonDeterministic];
