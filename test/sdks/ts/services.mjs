// The cross-SDK contract (test/sdks/CONTRACT.md) in the TypeScript SDK, run as its own process
// like the other SDKs' endpoints: PORT, RECORD_FILE, IDENTITY_KEY.
import fs from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { Duplex } from 'node:stream';
import * as restate from '@restatedev/restate-sdk';

const { RestatePromise, TerminalError, serde } = restate;
const shared = restate.handlers.object.shared;

function record(line) {
  if (process.env.RECORD_FILE) fs.appendFileSync(process.env.RECORD_FILE, `${line}\n`);
}
const counts = new Map();
function bump(name) {
  const n = (counts.get(name) ?? 0) + 1;
  counts.set(name, n);
  return n;
}
const json = (v) => new TextEncoder().encode(JSON.stringify(v));

async function addTo(ctx, n) {
  const next = ((await ctx.get('count')) ?? 0) + n;
  ctx.set('count', next);
  return next;
}

const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, n) => addTo(ctx, n),
    get: shared(async (ctx) => (await ctx.get('count')) ?? 0),
    set: async (ctx, { key, value }) => void ctx.set(key, value),
    read: shared(async (ctx, key) => (await ctx.get(key)) ?? null),
    keys: shared(async (ctx) => (await ctx.stateKeys()).sort()),
    clear: async (ctx, key) => void ctx.clear(key),
    clearAll: async (ctx) => void ctx.clearAll(),
    addThenFail: async (ctx, n) => {
      await addTo(ctx, n);
      throw new TerminalError(`failed after add ${n}`, { errorCode: 400 });
    },
    failThenAdd: async (ctx, n) => {
      const k = bump(`failThenAdd:${ctx.key}`);
      if (k < 3) throw new Error(`retryable ${k}`);
      return addTo(ctx, n);
    },
  },
});

const listObject = restate.object({
  name: 'ListObject',
  handlers: {
    append: async (ctx, value) => {
      const list = [...((await ctx.get('list')) ?? []), value];
      ctx.set('list', list);
      return list;
    },
    get: shared(async (ctx) => (await ctx.get('list')) ?? []),
  },
});

function target(req) {
  return {
    service: req.service,
    method: req.handler,
    key: req.key,
    parameter: json(req.input),
    ...(req.idempotencyKey ? { idempotencyKey: req.idempotencyKey } : {}),
  };
}

const proxy = restate.service({
  name: 'Proxy',
  handlers: {
    call: async (ctx, req) => JSON.parse(new TextDecoder().decode(await ctx.genericCall(target(req)))),
    send: async (ctx, req) => void ctx.genericSend({ ...target(req), ...(req.delayMs ? { delay: req.delayMs } : {}) }),
    manyCalls: async (ctx, reqs) => {
      const calls = [];
      for (const { req, oneWay } of reqs) {
        if (oneWay) ctx.genericSend(target(req));
        else calls.push(ctx.genericCall(target(req)));
      }
      await RestatePromise.all(calls);
      return null;
    },
    cancel: async (ctx, id) => void ctx.cancel(id),
  },
});

const sleeper = restate.service({
  name: 'Sleeper',
  handlers: {
    sleep: async (ctx, { ms, tag }) => {
      if (tag) await ctx.run('before', () => record(`${tag}:before`));
      await ctx.sleep(ms);
      if (tag) await ctx.run('after', () => record(`${tag}:after`));
      return null;
    },
    sleepMany: async (ctx, durations) => {
      await RestatePromise.all(durations.map((ms) => ctx.sleep(ms)));
      return null;
    },
  },
});

function heldAwakeable(ctx, key) {
  const { id, promise } = ctx.awakeable();
  ctx.objectSendClient({ name: 'AwakeableHolder' }, key).hold(id);
  return promise;
}

const awaiter = restate.service({
  name: 'Awaiter',
  handlers: {
    awakeable: async (ctx, { key, timeoutMs }) => {
      const value = heldAwakeable(ctx, key);
      if (timeoutMs === undefined) return value;
      return RestatePromise.race([value, ctx.sleep(timeoutMs).map(() => 'timeout')]);
    },
    callOrTimeout: async (ctx, { sleepMs, timeoutMs }) => {
      const call = ctx.serviceClient({ name: 'Sleeper' }).sleep({ ms: sleepMs }).map(() => 'call');
      return RestatePromise.race([call, ctx.sleep(timeoutMs).map(() => 'timeout')]);
    },
    all: async (ctx, { key, sleepMs }) => {
      const value = heldAwakeable(ctx, key);
      const added = ctx.objectClient({ name: 'Counter' }, key).add(1);
      const [v, n] = await RestatePromise.all([value, added, ctx.sleep(sleepMs)]);
      return `${v}|${n}`;
    },
    resolve: async (ctx, { id, value }) => void ctx.resolveAwakeable(id, value),
    reject: async (ctx, { id, reason }) => void ctx.rejectAwakeable(id, reason),
  },
});

const awakeableHolder = restate.object({
  name: 'AwakeableHolder',
  handlers: {
    hold: async (ctx, id) => void ctx.set('id', id),
    get: shared(async (ctx) => (await ctx.get('id')) ?? null),
  },
});

const signals = restate.service({
  name: 'Signals',
  handlers: {
    wait: async (ctx, { name }) => ctx.signal(name),
    send: async (ctx, { id, name, value }) => void ctx.invocation(id).signal(name).resolve(value),
    reject: async (ctx, { id, name, reason }) => void ctx.invocation(id).signal(name).reject(reason),
  },
});

const failing = restate.service({
  name: 'Failing',
  handlers: {
    terminal: async (_ctx, { message, code, metadata }) => {
      throw new TerminalError(message, { ...(code ? { errorCode: code } : {}), ...(metadata ? { metadata } : {}) });
    },
  },
});

const runner = restate.service({
  name: 'Runner',
  handlers: {
    retry: async (ctx, { tag, failures }) => {
      const k = await ctx.run(
        'flaky',
        () => {
          record(`${tag}:run`);
          const k = bump(`run:${tag}`);
          if (k <= failures) throw new Error(`flaky ${k}`);
          return k;
        },
        { maxRetryAttempts: failures + 3, initialRetryInterval: 10 },
      );
      if (bump(`handler:${tag}`) === 1) throw new Error('force a replay after the run');
      return k;
    },
    exhausted: async (ctx, { tag, maxAttempts }) => {
      await ctx.run(
        'always',
        () => {
          record(`${tag}:run`);
          throw new Error('always fails');
        },
        { maxRetryAttempts: maxAttempts, initialRetryInterval: 10 },
      );
    },
    terminal: async (ctx, { tag }) => {
      await ctx.run('terminal', () => {
        record(`${tag}:run`);
        throw new TerminalError('terminal in run', { errorCode: 409 });
      });
    },
    countRuns: async (ctx, n) => {
      let count = 0;
      for (let i = 0; i < n; i++) await ctx.run(`inc ${i}`, () => void count++);
      return count;
    },
  },
});

// First attempt: A; every later attempt: B, at the same journal index.
async function nonDet(ctx, name, a, b) {
  const k = bump(`${name}:${ctx.key}`);
  await (k === 1 ? a() : b());
  await ctx.sleep(20);
  if (k === 1) throw new Error('force a replay');
  ctx.objectSendClient({ name: 'Counter' }, ctx.key).add(1);
  return 'never';
}
const counterOf = (ctx) => ctx.objectClient({ name: 'Counter' }, ctx.key);
const counterSendOf = (ctx) => ctx.objectSendClient({ name: 'Counter' }, ctx.key);

const nonDeterministic = restate.object({
  name: 'NonDeterministic',
  handlers: {
    eitherSleepOrCall: async (ctx) => nonDet(ctx, 'eitherSleepOrCall', () => ctx.sleep(10), () => counterOf(ctx).get()),
    callDifferentMethod: async (ctx) => nonDet(ctx, 'callDifferentMethod', () => counterOf(ctx).get(), () => counterOf(ctx).keys()),
    sendDifferentTarget: async (ctx) =>
      nonDet(ctx, 'sendDifferentTarget', async () => void counterSendOf(ctx).get(), async () => void counterSendOf(ctx).keys()),
    setDifferentKey: async (ctx) =>
      nonDet(ctx, 'setDifferentKey', async () => ctx.set('a', 1), async () => ctx.set('b', 1)),
  },
});

const echo = restate.service({
  name: 'Echo',
  handlers: {
    headers: async (ctx) => Object.fromEntries([...ctx.request().headers].map(([k, v]) => [k.toLowerCase(), v])),
    raw: restate.handlers.handler({ input: serde.binary, output: serde.binary }, async (_ctx, bytes) => bytes),
  },
});

const signup = restate.workflow({
  name: 'Signup',
  handlers: {
    run: async (ctx, name) => {
      await ctx.run('create', () => record(`${ctx.key}:create`));
      ctx.set('status', 'waiting');
      const approval = await ctx.promise('approval');
      ctx.set('status', 'approved');
      return `${name}:${approval}`;
    },
    approve: async (ctx, value) => void (await ctx.promise('approval').resolve(value)),
    status: async (ctx) => (await ctx.get('status')) ?? null,
  },
});

const services = [counter, listObject, proxy, sleeper, awaiter, awakeableHolder, signals, failing, runner, nonDeterministic, echo, signup];
const identityKeys = process.env.IDENTITY_KEY ? [process.env.IDENTITY_KEY] : undefined;
const handler = restate.createEndpointHandler({ services, ...(identityKeys ? { identityKeys } : {}) });
// One port for HTTP/2 (prior knowledge) and HTTP/1.1, as the Python and Java SDKs serve: Node's
// allowHTTP1 works only over TLS, so the first bytes pick the server (HTTP/2 opens with "PRI").
// The HTTP/2 session reads the socket's handle directly and would miss those bytes: it gets a
// stream that gives them again.
const h2 = http2.createServer(handler);
const h1 = http.createServer(handler);
net.createServer((socket) => {
  socket.once('data', (first) => {
    socket.pause();
    if (first.subarray(0, 3).toString('latin1') === 'PRI') {
      h2.emit('connection', replaying(socket, first));
    } else {
      socket.unshift(first);
      h1.emit('connection', socket);
      socket.resume();
    }
  });
}).listen(Number(process.env.PORT ?? 9080), '127.0.0.1');

function replaying(socket, first) {
  const stream = new Duplex({
    read: () => socket.resume(),
    write: (chunk, encoding, done) => socket.write(chunk, encoding, done),
    final: (done) => socket.end(done),
    destroy: (err, done) => { socket.destroy(err ?? undefined); done(err); },
  });
  stream.push(first);
  socket.on('data', (chunk) => { if (!stream.push(chunk)) socket.pause(); });
  socket.on('end', () => stream.push(null));
  socket.on('error', (err) => stream.destroy(err));
  socket.on('close', () => stream.destroy());
  return stream;
}
