// The services the cluster tests call: a recorded step (each run counted, so a step run twice
// after a failover shows), a counter object (its state the fold of its adds), a ledger (the
// items a subscription delivered, in order), a workflow and a call waiting on an awakeable.
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

/** Every Ledger/add applied, in the order they ran: { key, i }. */
export const ledgerAdds = [];

/** An object that keeps the items added to it, in order (a Kafka subscription's sink). */
export const ledger = restate.object({
  name: 'Ledger',
  handlers: {
    add: async (ctx, input) => {
      const items = (await ctx.get('items')) ?? [];
      items.push(input.i);
      ctx.set('items', items);
      ledgerAdds.push({ key: ctx.key, i: input.i });
    },
    get: restate.handlers.object.shared(async (ctx) => (await ctx.get('items')) ?? []),
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

/** A workflow whose run waits for its promise `go`, resolved by `approve`. */
export const flow = restate.workflow({
  name: 'Flow',
  handlers: {
    run: async (ctx, { tag }) => `${tag}:${await ctx.promise('go').get()}`,
    approve: async (ctx, value) => void (await ctx.promise('go').resolve(value)),
  },
});

/** The awakeable each Waiter call waits on, by the id the caller gave it. */
export const awakeables = new Map();

export const waiter = restate.service({
  name: 'Waiter',
  handlers: {
    wait: async (ctx, { id }) => {
      const { id: awakeable, promise } = ctx.awakeable();
      await ctx.run('publish', () => void awakeables.set(id, awakeable));
      return `woken with ${await promise}`;
    },
  },
});
