// SDK services for the durable-core tests. Each factory returns a fresh service definition and
// the in-process record of what its handler bodies did, so that a test can count executions.
import http2 from 'node:http2';
import * as restate from '@restatedev/restate-sdk';

/**
 * The seed's Greeter with its steps recorded: every execution of a `ctx.run` body pushes
 * { step, name, uuid, at } to `events` (at = wall-clock ms).
 */
export function countingGreeter({ name = 'Greeter', sleep_ms = 1000 } = {}) {
  const events = [];
  const service = restate.service({
    name,
    handlers: {
      greet: async (ctx, req) => {
        const greetingId = ctx.rand.uuidv4();
        await ctx.run('Notification', () => {
          events.push({ step: 'Notification', name: req.name, uuid: greetingId, at: Date.now() });
        });
        await ctx.sleep({ milliseconds: sleep_ms });
        await ctx.run('Reminder', () => {
          events.push({ step: 'Reminder', name: req.name, uuid: greetingId, at: Date.now() });
        });
        return { result: `You said hi to ${req.name}!` };
      },
    },
  });
  const count = (step, who) => events.filter((e) => e.step === step && (who === undefined || e.name === who)).length;
  return { service, events, count };
}

/** Go/Rust style: input and output are bare JSON strings, the handler is `Greet`. */
export const bareGreeter = restate.service({
  name: 'BareGreeter',
  handlers: {
    Greet: async (_ctx, name) => {
      if (typeof name !== 'string') throw new restate.TerminalError(`expected a string, got ${typeof name}`, { errorCode: 400 });
      return `You said hi to ${name}!`;
    },
  },
});

/**
 * Failure scenarios. `stats` counts, per input id, attempts of each handler and executions of
 * each ctx.run body.
 */
export function failingServices() {
  const stats = new Map();
  const bump = (id, what) => {
    let s = stats.get(id);
    if (s === undefined) stats.set(id, (s = {}));
    s[what] = (s[what] ?? 0) + 1;
    return s[what];
  };
  const get = (id, what) => stats.get(id)?.[what] ?? 0;
  const service = restate.service({
    name: 'Flaky',
    handlers: {
      // ctx.run once, then a retryable error on the first two attempts, success on the third.
      twiceThenOk: async (ctx, req) => {
        const attempt = bump(req.id, 'attempts');
        const step = await ctx.run('step1', () => {
          bump(req.id, 'step1');
          return `step1-of-${req.id}`;
        });
        if (attempt <= 2) throw new Error(`transient failure ${attempt} of ${req.id}`);
        return { ok: req.id, step, attempt };
      },
      terminal: async (_ctx, req) => {
        bump(req.id, 'attempts');
        throw new restate.TerminalError('nope', { errorCode: 418 });
      },
      alwaysFails: async (ctx, req) => {
        bump(req.id, 'attempts');
        await ctx.run('before', () => bump(req.id, 'before'));
        throw new Error(`always failing ${req.id}`);
      },
      // The code path changes between attempts: ctx.run('a') first, then ctx.sleep first.
      nondeterministic: async (ctx, req) => {
        const attempt = bump(req.id, 'attempts');
        if (attempt === 1) {
          await ctx.run('a', () => bump(req.id, 'a'));
          throw new Error('first attempt fails after recording a run');
        }
        await ctx.sleep({ milliseconds: 10 });
        await ctx.run('a', () => bump(req.id, 'a'));
        return 'unreachable';
      },
      echo: async (ctx, req) => {
        bump(req.id, 'attempts');
        const v = await ctx.run('echo', () => {
          bump(req.id, 'run');
          return req.id;
        });
        return { echo: v };
      },
    },
  });
  return { service, stats, get };
}

/**
 * Many-in-flight work: a ctx.run (counted per id) and a short sleep; returns a value computed
 * from the input so that each caller can check it got its own result.
 */
export function workService({ sleep_ms = 50 } = {}) {
  const runs = new Map();
  const service = restate.service({
    name: 'Work',
    handlers: {
      doIt: async (ctx, req) => {
        const token = await ctx.run('compute', () => {
          runs.set(req.id, (runs.get(req.id) ?? 0) + 1);
          return `t-${req.id}`;
        });
        await ctx.sleep({ milliseconds: sleep_ms });
        return { id: req.id, doubled: req.n * 2, token };
      },
    },
  });
  return { service, runs };
}

/**
 * Serves `services` over HTTP/2 like the SDK does, but announces at most protocol version
 * `max_version` in the discovery manifest, and records the content-type of every invoke request.
 * Returns { uri, seen: { invokeContentTypes, discoverCount } }.
 */
export async function serveWithMaxProtocol(t, services, max_version) {
  const handler = restate.createEndpointHandler({ services });
  const seen = { invokeContentTypes: [], discoverCount: 0 };
  const server = http2.createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    if (path.startsWith('/invoke/')) seen.invokeContentTypes.push(req.headers['content-type']);
    if (req.method === 'GET' && path === '/discover') {
      seen.discoverCount += 1;
      const chunks = [];
      let status = 200;
      let headers = {};
      const origWriteHead = res.writeHead.bind(res);
      const origWrite = res.write;
      const origEnd = res.end;
      res.writeHead = (s, h) => {
        status = s;
        headers = { ...(h ?? {}) };
        return res;
      };
      res.write = (chunk, cb) => {
        chunks.push(Buffer.from(chunk));
        if (typeof cb === 'function') cb();
        return true;
      };
      res.end = (chunk, cb) => {
        if (typeof chunk === 'function') [cb, chunk] = [chunk, undefined];
        if (chunk) chunks.push(Buffer.from(chunk));
        let body = Buffer.concat(chunks);
        if (status === 200) {
          const manifest = JSON.parse(body.toString('utf8'));
          manifest.maxProtocolVersion = max_version;
          body = Buffer.from(JSON.stringify(manifest));
        }
        for (const k of Object.keys(headers)) if (k.toLowerCase() === 'content-length') delete headers[k];
        // Http2ServerResponse.end calls this.write: put the originals back first.
        res.write = origWrite;
        res.end = origEnd;
        origWriteHead(status, { ...headers, 'content-length': String(body.length) });
        return res.end(body, cb);
      };
    }
    handler(req, res);
  });
  server.sessions = new Set();
  server.on('session', (s) => {
    server.sessions.add(s);
    s.on('close', () => server.sessions.delete(s));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise((resolve) => {
        for (const s of server.sessions) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { uri: `http://127.0.0.1:${server.address().port}/`, seen };
}

/**
 * An HTTP/2 SDK endpoint whose lifetime the test controls: `close()` stops it (dropping open
 * sessions) and `listen(port)` starts it again, e.g. on the port it had before.
 */
export async function controllableEndpoint(t, services, port = 0) {
  const handler = restate.createEndpointHandler({ services });
  let server;
  const ep = {
    port,
    uri: undefined,
    async listen(p = ep.port) {
      const srv = http2.createServer(handler);
      srv.sessions = new Set();
      srv.on('session', (s) => {
        srv.sessions.add(s);
        s.on('close', () => srv.sessions.delete(s));
      });
      await new Promise((resolve, reject) => {
        srv.once('error', reject);
        srv.listen(p, '127.0.0.1', resolve);
      });
      server = srv;
      ep.port = srv.address().port;
      ep.uri = `http://127.0.0.1:${ep.port}/`;
      return ep.uri;
    },
    close() {
      const s = server;
      server = undefined;
      if (s === undefined) return Promise.resolve();
      return new Promise((resolve) => {
        for (const x of s.sessions) x.destroy();
        s.close(() => resolve());
      });
    },
  };
  await ep.listen(port);
  t.teardown(() => ep.close());
  return ep;
}

