// Virtual objects for test/objects.test.mjs: a list with a slow read-sleep-write append,
// a gated exclusive handler, shared readers and every state operation; built twice, with eager
// state (the default) and with `enableLazyState: true` on every handler.
import * as restate from '@restatedev/restate-sdk';
import { waitGate } from './gates.mjs';

/** Rows { ev: 'start'|'end', name, key, item, at } pushed once per step (inside ctx.run). */
export const trace = [];

export function makeListObject(name, { lazy = false } = {}) {
  const opts = lazy ? { enableLazyState: true } : {};
  const ex = (fn) => restate.handlers.object.exclusive(opts, fn);
  const sh = (fn) => restate.handlers.object.shared(opts, fn);
  const snapshot = async (ctx) => {
    const keys = (await ctx.stateKeys()).sort();
    const values = {};
    for (const k of keys) values[k] = await ctx.get(k);
    return { keys, values };
  };
  return restate.object({
    name,
    handlers: {
      // read - sleep - write: loses updates unless invocations of one key are serialised
      append: ex(async (ctx, { item, ms = 150 }) => {
        const items = (await ctx.get('items')) ?? [];
        await ctx.run('start', () => void trace.push({ ev: 'start', name, key: ctx.key, item, at: Date.now() }));
        await ctx.sleep(ms);
        const next = [...items, item];
        ctx.set('items', next);
        await ctx.run('end', () => void trace.push({ ev: 'end', name, key: ctx.key, item, at: Date.now() }));
        return next;
      }),
      // holds the key until the test releases the gate `tag`
      hold: ex(async (ctx, tag) => {
        const v = await ctx.run('gate', () => waitGate(tag));
        return `${tag}:${v}`;
      }),
      items: sh(async (ctx) => (await ctx.get('items')) ?? []),
      setMany: ex(async (ctx, obj) => {
        for (const [k, v] of Object.entries(obj)) ctx.set(k, v);
        return 'ok';
      }),
      // reads after writes within one invocation see the writes
      setThenRead: ex(async (ctx, { k, v }) => {
        const before = await ctx.get(k);
        ctx.set(k, v);
        const after = await ctx.get(k);
        ctx.clear(k);
        const cleared = await ctx.get(k);
        ctx.set(k, v);
        return { before, after, cleared };
      }),
      clearOne: ex(async (ctx, k) => {
        ctx.clear(k);
        return 'ok';
      }),
      clearEverything: ex(async (ctx) => {
        ctx.clearAll();
        return await snapshot(ctx);
      }),
      snapshot: sh(snapshot),
      // a shared handler may not write state (RT0017)
      badWrite: sh(async (ctx) => {
        ctx.set('bad', 1);
        return 'wrote';
      }),
      snapshotExclusive: ex(snapshot),
    },
  });
}

export const listObj = makeListObject('ListObj');
export const lazyListObj = makeListObject('LazyListObj', { lazy: true });
