// The services the cluster tests call: a recorded step (each run counted, so a step run twice
// after a failover shows) and a counter object (its state the fold of its adds).
import * as restate from '@restatedev/restate-sdk';

/** Each recorded step's runs, by the id the caller gave it. */
export const stepRuns = new Map();

export const steps = restate.service({
  name: 'Steps',
  handlers: {
    run: async (ctx, { id }) => {
      await ctx.run('step', () => void stepRuns.set(id, (stepRuns.get(id) ?? 0) + 1));
      return `done ${id}`;
    },
  },
});

export const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, n) => {
      const next = ((await ctx.get('count')) ?? 0) + n;
      ctx.set('count', next);
      return next;
    },
    get: restate.handlers.object.shared(async (ctx) => (await ctx.get('count')) ?? 0),
  },
});
