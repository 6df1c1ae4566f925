// Services for test/idempotency.test.mjs. Every handler counts how often its body really ran
// (inside ctx.run, so replays do not count) and returns that count in its result.
import * as restate from '@restatedev/restate-sdk';
import { waitGate } from './gates.mjs';

/** tag -> number of executions of a handler body */
export const bodyRuns = new Map();
const bump = (tag) => {
  const n = (bodyRuns.get(tag) ?? 0) + 1;
  bodyRuns.set(tag, n);
  return n;
};

export const idem = restate.service({
  name: 'Idem',
  handlers: {
    work: async (ctx, tag) => `${tag}#${await ctx.run('count', () => bump(tag))}`,
    slow: async (ctx, tag) => {
      const n = await ctx.run('count', () => bump(tag));
      const v = await ctx.run('gate', () => waitGate(tag));
      return `${tag}#${n}:${v}`;
    },
    short: restate.handlers.handler({ idempotencyRetention: 1000 }, async (ctx, tag) => `${tag}#${await ctx.run('count', () => bump(tag))}`),
  },
});

export const idemObj = restate.object({
  name: 'IdemObj',
  handlers: {
    work: async (ctx, tag) => `${ctx.key}:${tag}#${await ctx.run('count', () => bump(tag))}`,
  },
});

export const idemCaller = restate.service({
  name: 'IdemCaller',
  handlers: {
    callTwice: async (ctx, { tag, key }) => {
      const a = await ctx.serviceClient(idem).work(tag, restate.rpc.opts({ idempotencyKey: key }));
      const b = await ctx.serviceClient(idem).work(tag, restate.rpc.opts({ idempotencyKey: key }));
      return [a, b];
    },
    callOnce: async (ctx, { tag, key }) => ctx.serviceClient(idem).work(tag, restate.rpc.opts({ idempotencyKey: key })),
    callObj: async (ctx, { obj, tag, key }) => ctx.objectClient(idemObj, obj).work(tag, restate.rpc.opts({ idempotencyKey: key })),
    sendTwice: async (ctx, { tag, key }) => {
      ctx.serviceSendClient(idem).work(tag, restate.rpc.sendOpts({ idempotencyKey: key }));
      ctx.serviceSendClient(idem).work(tag, restate.rpc.sendOpts({ idempotencyKey: key }));
      return 'sent';
    },
  },
});
