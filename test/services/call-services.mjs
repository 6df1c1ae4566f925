// SDK services for test/calls.test.mjs: calls and sends between services and objects.
import * as restate from '@restatedev/restate-sdk';
import { record, bumpAttempt } from './invocation-helpers.mjs';

export const callee = restate.service({
  name: 'Callee',
  handlers: {
    echo: async (ctx, x) => {
      record(`echo:${typeof x === 'object' && x && x.tag ? x.tag : 'none'}`, x);
      return { echoed: x, id: ctx.request().id };
    },
    fail: async (_ctx, { code, message, metadata }) => {
      throw new restate.TerminalError(message, { errorCode: code, metadata });
    },
    countRun: async (ctx, tag) => {
      const n = await ctx.run('count', () => record(`countRun:${tag}`, Date.now()) && 1);
      return `ran ${n}`;
    },
    slowEcho: async (ctx, { tag, ms }) => {
      await ctx.sleep(ms);
      record(`slowEcho:${tag}`, Date.now());
      return `slow ${tag}`;
    },
  },
});

export const keyed = restate.object({
  name: 'Keyed',
  handlers: {
    add: async (ctx, n) => {
      const next = ((await ctx.get('count')) ?? 0) + n;
      ctx.set('count', next);
      record(`Keyed.add:${ctx.key}`, n);
      return next;
    },
    get: restate.handlers.object.shared(async (ctx) => (await ctx.get('count')) ?? 0),
    // object -> object, across keys (and so usually across partitions)
    addTo: async (ctx, { key, n }) => {
      const theirs = await ctx.objectClient(keyed, key).add(n);
      const mine = ((await ctx.get('count')) ?? 0) + 1;
      ctx.set('count', mine);
      return { mine, theirs };
    },
    append: async (ctx, x) => {
      const order = (await ctx.get('order')) ?? [];
      order.push(x);
      ctx.set('order', order);
      return order.length;
    },
    order: restate.handlers.object.shared(async (ctx) => (await ctx.get('order')) ?? []),
  },
});

export const proxy = restate.service({
  name: 'Proxy',
  handlers: {
    callService: async (ctx, x) => ctx.serviceClient(callee).echo(x),
    callObject: async (ctx, { key, n }) => ctx.objectClient(keyed, key).add(n),
    send: async (ctx, { key, n }) => {
      const id = await ctx.objectSendClient(keyed, key).add(n).invocationId;
      return id;
    },
    sendDelayed: async (ctx, { key, n, delayMs }) => {
      const id = await ctx.objectSendClient(keyed, key).add(n, restate.rpc.sendOpts({ delay: delayMs })).invocationId;
      return id;
    },
    // CallOrdering: N one-way calls to the same key, in order.
    orderedSends: async (ctx, { key, n }) => {
      for (let i = 0; i < n; i++) ctx.objectSendClient(keyed, key).append(i);
      return n;
    },
    // A call, then sends, then a call to the same key: all in issue order.
    mixedOrder: async (ctx, { key }) => {
      await ctx.objectClient(keyed, key).append('call-0');
      ctx.objectSendClient(keyed, key).append('send-1');
      ctx.objectSendClient(keyed, key).append('send-2');
      return ctx.objectClient(keyed, key).append('call-3');
    },
    callUnknown: async (ctx) => {
      record('callUnknown', 'attempt');
      const out = await ctx.genericCall({ service: 'Nope', method: 'x', parameter: new Uint8Array() });
      return new TextDecoder().decode(out);
    },
    callFail: async (ctx, req) => ctx.serviceClient(callee).fail(req),
    callFailCaught: async (ctx, req) => {
      try {
        await ctx.serviceClient(callee).fail(req);
        return 'no error';
      } catch (e) {
        return {
          terminal: e instanceof restate.TerminalError,
          code: e.code,
          message: e.message,
          metadata: e.metadata ?? null,
        };
      }
    },
    sendAndAttach: async (ctx, x) => {
      const handle = ctx.serviceSendClient(callee).slowEcho(x);
      const id = await handle.invocationId;
      const result = await ctx.attach(id);
      const viaRef = await ctx.invocation(id).attach();
      return { id, result, viaRef };
    },
    callHandleId: async (ctx, x) => {
      const p = ctx.serviceClient(callee).echo(x);
      const id = await p.invocationId;
      const r = await p;
      return { id, calleeSawId: r.id };
    },
    // Exactly once: the call is made and completed, then this attempt fails (retryable).
    exactlyOnceAfterResult: async (ctx, tag) => {
      const n = bumpAttempt(`eo1:${tag}`);
      const r = await ctx.serviceClient(callee).countRun(tag);
      if (n === 1) throw new Error('caller fails after the call result (first attempt)');
      return r;
    },
    // Exactly once: the call is issued (its id known), then this attempt fails before the result.
    exactlyOnceBeforeResult: async (ctx, tag) => {
      const n = bumpAttempt(`eo2:${tag}`);
      const p = ctx.serviceClient(callee).countRun(tag);
      await p.invocationId;
      if (n === 1) throw new Error('caller fails after issuing the call (first attempt)');
      return p;
    },
  },
});

export const callServices = [callee, keyed, proxy];
