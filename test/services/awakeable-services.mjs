// SDK services for test/awakeables.test.mjs: awakeables, combinators, deterministic random.
import * as restate from '@restatedev/restate-sdk';
import { record, bumpAttempt } from './invocation-helpers.mjs';

const { RestatePromise, TerminalError, TimeoutError } = restate;

function describeError(e) {
  return {
    error: e.message,
    code: e.code,
    terminal: e instanceof TerminalError,
    timeout: e instanceof TimeoutError,
  };
}

export const awk = restate.service({
  name: 'Awk',
  handlers: {
    // Publishes the awakeable id (into records under `tag`) and returns what it is completed with.
    wait: async (ctx, tag) => {
      const { id, promise } = ctx.awakeable();
      await ctx.run('publish', () => record(tag, id));
      try {
        return { value: await promise };
      } catch (e) {
        return describeError(e);
      }
    },
    waitTimeout: async (ctx, { tag, ms }) => {
      const { id, promise } = ctx.awakeable();
      await ctx.run('publish', () => record(tag, id));
      try {
        return { value: await promise.orTimeout(ms) };
      } catch (e) {
        return describeError(e);
      }
    },
    resolveOther: async (ctx, { id, value }) => {
      ctx.resolveAwakeable(id, value);
      return 'resolved';
    },
    rejectOther: async (ctx, { id, reason }) => {
      ctx.rejectAwakeable(id, reason);
      return 'rejected';
    },
    // race: an awakeable against a sleep.
    race: async (ctx, { tag, sleepMs }) => {
      const a = ctx.awakeable();
      await ctx.run('publish', () => record(tag, a.id));
      return RestatePromise.race([a.promise.map((v) => ({ awakeable: v })), ctx.sleep(sleepMs).map(() => 'slept')]);
    },
    // all: two awakeables; the result keeps the argument order whatever the completion order.
    all: async (ctx, tag) => {
      const a = ctx.awakeable();
      const b = ctx.awakeable();
      await ctx.run('publish', () => record(tag, [a.id, b.id]));
      return RestatePromise.all([a.promise, b.promise, ctx.sleep(10).map(() => 'slept')]);
    },
    // any: the first successful completion wins, failures are skipped.
    any: async (ctx, tag) => {
      const a = ctx.awakeable();
      const b = ctx.awakeable();
      await ctx.run('publish', () => record(tag, [a.id, b.id]));
      return RestatePromise.any([a.promise, b.promise]);
    },
    anyAllFail: async (ctx, tag) => {
      const a = ctx.awakeable();
      const b = ctx.awakeable();
      await ctx.run('publish', () => record(tag, [a.id, b.id]));
      try {
        return await RestatePromise.any([a.promise, b.promise]);
      } catch (e) {
        return { failed: e.constructor.name, errors: (e.errors ?? []).map((x) => x.message) };
      }
    },
    allSettled: async (ctx, tag) => {
      const a = ctx.awakeable();
      await ctx.run('publish', () => record(tag, a.id));
      const settled = await RestatePromise.allSettled([a.promise, ctx.sleep(50).map(() => 'slept')]);
      return settled.map((s) => (s.status === 'fulfilled' ? { ok: s.value } : { err: s.reason.message }));
    },
    // Deterministic random: the values are recorded on every attempt (plain code); attempt 1
    // fails after journaling a step, so attempt 2 replays and must produce the same values.
    randRetry: async (ctx, tag) => {
      const n = bumpAttempt(`rand:${tag}`);
      const values = { uuid: ctx.rand.uuidv4(), r: ctx.rand.random(), r2: ctx.rand.random() };
      record(tag, values);
      await ctx.run('step', () => 'journaled');
      if (n === 1) throw new Error('fail after recording the random values');
      const after = ctx.rand.uuidv4();
      record(`${tag}:after`, after);
      return { ...values, after };
    },
    // Deterministic random across a Keel crash: values recorded, then a durable sleep.
    randSleep: async (ctx, { tag, ms }) => {
      const values = { uuid: ctx.rand.uuidv4(), r: ctx.rand.random() };
      record(tag, values);
      await ctx.sleep(ms);
      const after = ctx.rand.uuidv4();
      return { ...values, after };
    },
  },
});

export const awakeableServices = [awk];
