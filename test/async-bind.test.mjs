// The server's lean AsyncResource.prototype.bind (src/common/async-bind.ts): it binds as Node's
// does — the resource's async scope, `this`, `thisArg`, `length`, `asyncResource` — without
// DEP0172's per-call accessors, and Node's HTTP/2 client (which binds once per request) works on it.
import t from 'tap';
import http2 from 'node:http2';
import { AsyncLocalStorage, AsyncResource } from 'node:async_hooks';
import { installLeanAsyncBind } from '../dist/common/async-bind.js';

const nodeBind = AsyncResource.prototype.bind;
installLeanAsyncBind();

t.test('installed once: a second install keeps the first', async (t) => {
  t.not(AsyncResource.prototype.bind, nodeBind);
  const lean = AsyncResource.prototype.bind;
  installLeanAsyncBind();
  t.equal(AsyncResource.prototype.bind, lean);
});

t.test('the bound function runs in the async scope of the resource, not of its caller', async (t) => {
  const als = new AsyncLocalStorage();
  const bound = als.run('where it was bound', () => new AsyncResource('T').bind(() => als.getStore()));
  t.equal(als.run('the caller', () => bound()), 'where it was bound');
  t.equal(bound(), 'where it was bound', 'outside any store too');
});

t.test('this, thisArg, arguments, return value, length and asyncResource as Node gives them', async (t) => {
  const resource = new AsyncResource('T');
  function f(a, b) {
    return [this, a, b];
  }
  const bound = resource.bind(f);
  const self = { name: 'caller' };
  t.same(bound.call(self, 1, 2), [self, 1, 2], 'the caller\'s this and arguments');
  t.equal(bound.length, 2, 'length is the function\'s');
  t.equal(bound.asyncResource, resource);
  const fixed = { name: 'fixed' };
  const boundTo = resource.bind(f, fixed);
  t.same(boundTo.call(self, 3, 4), [fixed, 3, 4], 'thisArg wins over the caller\'s this');
  t.equal(boundTo.length, 2);
  const viaStatic = AsyncResource.bind(f);
  t.equal(viaStatic.length, 2);
  t.equal(Object.getOwnPropertyDescriptor(viaStatic, 'asyncResource').get, undefined, 'the static bind goes through it too (a plain property, not DEP0172\'s accessor)');
  t.equal(bound.name, 'bound', 'named as Node names it');
  t.throws(() => resource.bind('not a function'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
});

t.test('no DEP0172 warning when asyncResource is read or written', async (t) => {
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on('warning', onWarning);
  const bound = new AsyncResource('T').bind(() => {});
  void bound.asyncResource;
  bound.asyncResource = new AsyncResource('U');
  await new Promise((r) => setImmediate(r));
  process.off('warning', onWarning);
  t.same(warnings.map((w) => w.code), []);
});

t.test('Node\'s HTTP/2 client, which binds once per request, works on it, callbacks in the caller\'s scope', async (t) => {
  const server = http2.createServer((req, res) => res.end(`hello ${req.url}`));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const session = http2.connect(`http://127.0.0.1:${server.address().port}`);
  t.teardown(() => session.close());
  const als = new AsyncLocalStorage();
  const ask = (path) =>
    als.run(path, () => new Promise((resolve, reject) => {
      // Sent before the session connects: Node's request waits for 'connect' through the bound function.
      const req = session.request({ ':path': path });
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c) => (body += c));
      req.on('end', () => resolve({ body, store: als.getStore() }));
      req.on('error', reject);
    }));
  const answers = await Promise.all(['/a', '/b', '/c'].map(ask));
  t.same(answers, [{ body: 'hello /a', store: '/a' }, { body: 'hello /b', store: '/b' }, { body: 'hello /c', store: '/c' }]);
});
