// SDK services exercising the context API: objects, calls, awakeables, workflows.
import * as restate from '@restatedev/restate-sdk';

export const events = [];

export const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, n) => {
      const current = (await ctx.get('count')) ?? 0;
      const next = current + n;
      ctx.set('count', next);
      return next;
    },
    slowAdd: async (ctx, n) => {
      const current = (await ctx.get('count')) ?? 0;
      await ctx.sleep(200);
      ctx.set('count', current + n);
      events.push(`slowAdd:${ctx.key}:${n}`);
      return current + n;
    },
    get: restate.handlers.object.shared(async (ctx) => (await ctx.get('count')) ?? 0),
    keys: restate.handlers.object.shared(async (ctx) => (await ctx.stateKeys()).sort()),
    clear: async (ctx) => {
      ctx.clearAll();
    },
  },
});

export const caller = restate.service({
  name: 'Caller',
  handlers: {
    callCounter: async (ctx, { key, n }) => ctx.objectClient(counter, key).add(n),
    sendCounter: async (ctx, { key, n, delayMs }) => {
      if (delayMs) ctx.objectSendClient(counter, key).add(n, restate.rpc.sendOpts({ delay: delayMs }));
      else ctx.objectSendClient(counter, key).add(n);
      return 'sent';
    },
    awake: async (ctx, name) => {
      const { id, promise } = ctx.awakeable();
      await ctx.run('publish', () => events.push(`awakeable:${name}:${id}`));
      return `got ${await promise}`;
    },
    resolveOther: async (ctx, { id, value }) => {
      ctx.resolveAwakeable(id, value);
      return 'ok';
    },
  },
});

export const signup = restate.workflow({
  name: 'Signup',
  handlers: {
    run: async (ctx, email) => {
      ctx.set('email', email);
      const code = await ctx.promise('code').get();
      return `verified ${email} with ${code}`;
    },
    confirm: async (ctx, code) => {
      await ctx.promise('code').resolve(code);
      return 'confirmed';
    },
    email: async (ctx) => ctx.get('email'),
  },
});
