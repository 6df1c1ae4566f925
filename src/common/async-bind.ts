// Node's `AsyncResource.prototype.bind` gives every bound function an `asyncResource` accessor
// pair, each made through `util.deprecate` (DEP0172) on every call. Node's HTTP/2 client binds
// one function per request (`ClientHttp2Session.request`), so each invocation the server sends to
// an endpoint paid for them: 17 µs per bind on Node 20 (1.2 µs with the plain property below,
// measured here), about 3% of the server's main-thread CPU per noop invocation at c=32.
import { AsyncResource } from 'node:async_hooks';

const LEAN = Symbol.for('keel.lean_async_bind');

/**
 * Replaces `AsyncResource.prototype.bind`, once per process, with one that binds the same way
 * (the function runs in the resource's async scope, with the caller's `this` unless `thisArg` is
 * given, and keeps its `length`) and gives the bound function `asyncResource` as a plain
 * property, as Node did before DEP0172, without the warning its accessors would print.
 */
export function installLeanAsyncBind(): void {
  const proto = AsyncResource.prototype as AsyncResource & { [LEAN]?: true };
  if (proto[LEAN]) return;
  type Fn = (...args: unknown[]) => unknown;
  proto.bind = function bind(this: AsyncResource, fn: Fn, thisArg?: unknown): Fn {
    if (typeof fn !== 'function') throw Object.assign(new TypeError(`The "fn" argument must be of type function. Received type ${typeof fn}`), { code: 'ERR_INVALID_ARG_TYPE' });
    const resource = this;
    const bound: Fn =
      thisArg === undefined
        ? function bound(this: unknown, ...args: unknown[]) {
            return resource.runInAsyncScope(fn, this, ...args);
          }
        : resource.runInAsyncScope.bind(resource, fn, thisArg);
    Object.defineProperty(bound, 'length', { configurable: true, enumerable: false, value: fn.length, writable: false });
    return Object.assign(bound, { asyncResource: resource });
  } as AsyncResource['bind'];
  proto[LEAN] = true;
}
