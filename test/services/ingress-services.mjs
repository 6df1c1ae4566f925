// Services for test/ingress.test.mjs: header echo, raw bytes, an execution recorder for delayed
// sends, a gated handler for attach/output, an ingress-private handler and a keyed object.
import * as restate from '@restatedev/restate-sdk';
import { waitGate } from './gates.mjs';

/** { tag, at } once per execution of Echo/record (inside ctx.run). */
export const executions = [];

export const echo = restate.service({
  name: 'Echo',
  handlers: {
    headers: async (ctx) => Object.fromEntries(ctx.request().headers),
    reverse: restate.handlers.handler(
      { input: restate.serde.binary, output: restate.serde.binary },
      async (_ctx, bytes) => Uint8Array.from(bytes).reverse(),
    ),
    record: async (ctx, tag) => {
      await ctx.run('record', () => void executions.push({ tag, at: Date.now() }));
      return `recorded ${tag}`;
    },
    hold: async (ctx, tag) => `${tag}:${await ctx.run('gate', () => waitGate(tag))}`,
    secret: restate.handlers.handler({ ingressPrivate: true }, async (_ctx, x) => `secret ${x}`),
    callSecret: async (ctx, x) => ctx.serviceClient({ name: 'Echo' }).secret(x),
  },
});

export const echoObj = restate.object({
  name: 'EchoObj',
  handlers: {
    whoami: async (ctx, x) => {
      ctx.set('last', x);
      return `${ctx.key}:${x}`;
    },
    last: restate.handlers.object.shared(async (ctx) => (await ctx.get('last')) ?? null),
  },
});
