// A workflow for test/workflows.test.mjs: `run` waits on the durable promise `p`; shared handlers
// resolve, reject and peek it, and read the workflow's state.
import * as restate from '@restatedev/restate-sdk';

/** How many times the body of `run` executed, per workflow key. */
export const runs = new Map();

const shared = restate.handlers.workflow.shared;

export const wf = restate.workflow({
  name: 'Wf',
  handlers: {
    run: async (ctx, input) => {
      await ctx.run('count', () => void runs.set(ctx.key, (runs.get(ctx.key) ?? 0) + 1));
      ctx.set('stage', 'waiting');
      ctx.set('input', input);
      const v = await ctx.promise('p').get();
      ctx.set('stage', 'done');
      return `run ${input} got ${JSON.stringify(v)}`;
    },
    resolve: shared(async (ctx, v) => {
      await ctx.promise('p').resolve(v);
      return 'resolved';
    }),
    resolveCatch: shared(async (ctx, v) => {
      try {
        await ctx.promise('p').resolve(v);
        return { ok: true };
      } catch (e) {
        return { code: e.code, message: e.message };
      }
    }),
    reject: shared(async (ctx, msg) => {
      await ctx.promise('p').reject(msg);
      return 'rejected';
    }),
    peek: shared(async (ctx) => ({ value: (await ctx.promise('p').peek()) ?? null })),
    stage: shared(async (ctx) => ({ stage: (await ctx.get('stage')) ?? null, input: (await ctx.get('input')) ?? null })),
  },
});
