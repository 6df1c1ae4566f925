// SDK services for test/cancellation.test.mjs: cancel, kill, purge, pause/resume, restart-as-new.
import * as restate from '@restatedev/restate-sdk';
import { record, broken } from './invocation-helpers.mjs';

// Awaits an awakeable (published under `tag`); when the wait fails (cancellation) it runs a
// journaled compensation step and rethrows.
async function blockOn(ctx, tag) {
  const { id, promise } = ctx.awakeable();
  await ctx.run('publish', () => record(tag, id));
  try {
    const v = await promise;
    record(`after:${tag}`, v);
    return v;
  } catch (e) {
    await ctx.run('compensate', () => record(`comp:${tag}`, { name: e.constructor.name, code: e.code, message: e.message }));
    throw e;
  }
}

export const blocker = restate.service({
  name: 'Blocker',
  handlers: {
    block: async (ctx, tag) => blockOn(ctx, tag),
    sleep: async (ctx, tag) => {
      await ctx.run('started', () => record(tag, ctx.request().id));
      try {
        await ctx.sleep(60_000);
        record(`after:${tag}`, 'woke');
      } catch (e) {
        await ctx.run('compensate', () => record(`comp:${tag}`, { name: e.constructor.name, code: e.code, message: e.message }));
        throw e;
      }
    },
  },
});

export const parent = restate.service({
  name: 'Parent',
  handlers: {
    callChild: async (ctx, tag) => {
      try {
        const r = await ctx.serviceClient(blocker).block(`${tag}-child`);
        record(`after:${tag}`, r);
        return r;
      } catch (e) {
        await ctx.run('compensate', () => record(`comp:${tag}`, { name: e.constructor.name, code: e.code, message: e.message }));
        throw e;
      }
    },
  },
});

export const canceller = restate.service({
  name: 'Canceller',
  handlers: {
    cancel: async (ctx, id) => {
      ctx.cancel(id);
      return 'cancel sent';
    },
    cancelViaRef: async (ctx, id) => {
      ctx.invocation(id).cancel();
      return 'cancel sent';
    },
  },
});

export const lockObj = restate.object({
  name: 'LockObj',
  handlers: {
    hold: async (ctx, tag) => {
      ctx.set('progress', 'holding');
      const v = await blockOn(ctx, tag);
      ctx.set('progress', 'done');
      return v;
    },
    quick: async (ctx, tag) => {
      record(tag, 'quick ran');
      return `quick ${tag}`;
    },
  },
});

export const flaky = restate.service({
  name: 'Flaky',
  handlers: {
    run: async (ctx, tag) => {
      record(`attempt:${tag}`, Date.now());
      if (broken.get(tag)) throw new Error(`still broken: ${tag}`);
      return `fixed ${tag}`;
    },
  },
});

export const echo = restate.service({
  name: 'Echo',
  handlers: {
    echo: async (ctx, x) => {
      record(`echo:${x.tag}`, ctx.request().id);
      return { x, id: ctx.request().id };
    },
  },
});

/** A workflow that returns at once: a completed run to refuse restarting as new. */
export const once = restate.workflow({
  name: 'Once',
  handlers: {
    run: async (ctx, x) => `ran ${x}`,
  },
});

export const cancelServices = [blocker, parent, canceller, lockObj, flaky, echo, once];
