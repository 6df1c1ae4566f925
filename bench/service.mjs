// The SDK service endpoint every server calls during the benchmark.
//   Bench/noop    – returns at once (no journal entries besides input/output)
//   Bench/steps   – three ctx.run steps
//   Bench/sleepy  – one durable sleep ({"ms": N}, default 3000) then returns; its inactivity timeout is
//                   short, so the server closes the stream and the SDK suspends it while it sleeps
//   Counter/{key}/add – virtual object: ctx.get('count'), ctx.set('count', count + delta), returns the new count
//   Counter/{key}/get – shared: the current count (the correctness check reads it)
//   Greeter/greet – the seed's Greeter (uuid, run, durable 1 s sleep, run)
//   Store/{key}/put – virtual object: ctx.set('blob', a string of {"bytes": N} characters) (the retained-state fill)
//   Store/{key}/size – shared: the length of the stored blob (0 without one), read from the server's state
//   Bench/kafkaNoop – a subscription's sink: returns at once, and counts the records it saw (calls, distinct
//                   kafka.partition/kafka.offset, first and last time) for GET /count on BENCH_COUNTER_PORT
// Run: node bench/service.mjs [port]   (PORT env works too; BENCH_SERVICE_HOST, default 127.0.0.1;
// BENCH_SERVICE_WORKERS and BENCH_SERVICE_MAX_STREAMS: see serviceShape)
//
// Same as `restate.serve({services, port})` (which is http2.createServer(<endpoint handler>).listen(port)),
// except that we bind to 127.0.0.1 only instead of all interfaces.
import cluster from 'node:cluster';
import * as http from 'node:http';
import * as http2 from 'node:http2';
import * as restate from '@restatedev/restate-sdk';
import { greeter } from '../examples/greeter/greeter.mjs';

/** What Bench/kafkaNoop saw: every call, the distinct records, when the first and the last came. */
const kafka = { calls: 0, records: new Set(), first_ms: 0, last_ms: 0 };

export const bench = restate.service({
  name: 'Bench',
  handlers: {
    noop: async (_ctx, req) => ({ ok: true, name: req?.name ?? null }),
    kafkaNoop: async (ctx) => {
      const h = ctx.request().headers;
      kafka.calls++;
      kafka.records.add(`${h.get('kafka.partition')}/${h.get('kafka.offset')}`);
      kafka.last_ms = Date.now();
      kafka.first_ms ||= kafka.last_ms;
    },
    steps: async (ctx, req) => {
      const a = await ctx.run('step-1', () => 1);
      const b = await ctx.run('step-2', () => a + 1);
      const c = await ctx.run('step-3', () => b + 1);
      return { steps: [a, b, c], name: req?.name ?? null };
    },
    /** Holds its attempt for `ms` (20) without a suspension point: a slot taken that long (bench/flow.mjs). */
    hold: async (_ctx, req) => {
      await new Promise((r) => setTimeout(r, Number(req?.ms ?? 20)));
      return { ok: true };
    },
    sleepy: restate.handlers.handler({ inactivityTimeout: 200 }, async (ctx, req) => {
      await ctx.sleep(Number(req?.ms ?? 3000));
      return { slept: true };
    }),
  },
});

export const counter = restate.object({
  name: 'Counter',
  handlers: {
    add: async (ctx, req) => {
      const next = ((await ctx.get('count')) ?? 0) + Number(req?.delta ?? 1);
      ctx.set('count', next);
      return next;
    },
    get: restate.handlers.object.shared(async (ctx) => (await ctx.get('count')) ?? 0),
  },
});

export const store = restate.object({
  name: 'Store',
  handlers: {
    put: async (ctx, req) => {
      ctx.set('blob', 'x'.repeat(Number(req?.bytes ?? 8192)));
      return true;
    },
    size: restate.handlers.object.shared(async (ctx) => ((await ctx.get('blob')) ?? '').length),
  },
});

export const services = [bench, counter, greeter, store];

/**
 * How the endpoint is served (env): BENCH_SERVICE_WORKERS processes (node:cluster, default 1) on one port, and
 * BENCH_SERVICE_MAX_STREAMS, the HTTP/2 streams one connection may carry (the SETTINGS both servers' pools
 * honour by opening more connections). One Node process spends about as much CPU per call as Keel does, so on a
 * machine with cores to spare (the scaling cell at 4 and 8 server cores) one service process would be what
 * limits the run; the cluster spreads connections, not streams, so the limit makes the server open several.
 */
export function serviceShape(env = process.env) {
  const workers = Number(env.BENCH_SERVICE_WORKERS ?? 1);
  const maxStreams = env.BENCH_SERVICE_MAX_STREAMS === undefined ? undefined : Number(env.BENCH_SERVICE_MAX_STREAMS);
  if (!Number.isInteger(workers) || workers < 1) throw new Error(`BENCH_SERVICE_WORKERS must be an integer >= 1, got '${env.BENCH_SERVICE_WORKERS}'`);
  if (maxStreams !== undefined && !(Number.isInteger(maxStreams) && maxStreams >= 1)) throw new Error(`BENCH_SERVICE_MAX_STREAMS must be an integer >= 1, got '${env.BENCH_SERVICE_MAX_STREAMS}'`);
  if (workers > 1 && Number(env.BENCH_COUNTER_PORT ?? 0)) throw new Error('BENCH_COUNTER_PORT counts one process\'s calls: it needs BENCH_SERVICE_WORKERS=1');
  return { workers, maxStreams };
}

function serve(port, host, maxStreams, onListening) {
  const settings = maxStreams === undefined ? undefined : { maxConcurrentStreams: maxStreams };
  const server = http2.createServer({ settings }, restate.createEndpointHandler({ services }));
  server.on('error', (e) => {
    console.error(`bench service: ${e.message}`);
    process.exit(1);
  });
  server.listen(port, host, () => onListening(server.address()));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.argv[2] ?? process.env.PORT ?? 9080);
  const host = process.env.BENCH_SERVICE_HOST ?? '127.0.0.1';
  const { workers, maxStreams } = serviceShape();
  // run.mjs waits for this line.
  const listening = (addr) => console.error(`bench service listening on ${host}:${addr.port} (${workers} process${workers > 1 ? 'es' : ''})`);
  if (workers > 1 && cluster.isPrimary) {
    let up = 0;
    for (let i = 0; i < workers; i++) cluster.fork();
    cluster.on('listening', (_w, addr) => ++up === workers && listening(addr));
    cluster.on('exit', (w, code, signal) => {
      console.error(`bench service: process ${w.process.pid} exited (${signal ?? code})`);
      process.exit(1);
    });
  } else {
    serve(port, host, maxStreams, cluster.isPrimary ? listening : () => {});
  }
  const counterPort = Number(process.env.BENCH_COUNTER_PORT ?? 0);
  if (counterPort) {
    http
      .createServer((_req, res) => res.end(JSON.stringify({ calls: kafka.calls, distinct: kafka.records.size, first_ms: kafka.first_ms, last_ms: kafka.last_ms })))
      .listen(counterPort, host);
  }
  for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
}
