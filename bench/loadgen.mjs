// Load generator: `concurrency` workers, each sends one request, waits for the answer, sends the next.
// Usage: node bench/loadgen.mjs '<json spec>'   → prints one JSON line with the results on stdout.
// spec: { url, body, expect?, concurrency, requestTimeoutMs, pids?: {server, service},
//         warmupMs, durationMs      – timed mode: unmeasured warmup, then a measured window (the default)
//         total                     – fixed-count mode: exactly `total` requests, measured from the first send
//                                     to the last answer (wallMs); no warmup
//         serverThreads?            – the server's CPU by thread over the measured window (bench/threads.mjs)
//         metricsUrl?               – a Keel server's /metrics, scraped right before and after the measured
//                                     window: `serverTail` (bench/tail.mjs) says what paused and wrote in it
//         keys?, keyPrefix?         – object mode: `{key}` in url is replaced by keyPrefix + i, i = 0..keys-1,
//                                     round robin over all requests; successes per key are counted in every
//                                     phase (warmup too), so they can be compared with the object's state }
// CPU of the pids' process trees is sampled right before and right after the measured window (after the drain);
// `cpuMs.loadgen` is this process's own over the same window.
import * as http from 'node:http';
import { sampleCpu } from './proc.mjs';
import { scrapeServerTail, serverTail } from './tail.mjs';
import { threadCpuMs, threadWindow } from './threads.mjs';

const spec = JSON.parse(process.argv[2]);
const body = Buffer.from(spec.body ?? '{}');
const concurrency = spec.concurrency;
const keys = spec.keys ?? 0;
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency, maxFreeSockets: concurrency });
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const paths = (() => {
  const u = new URL(spec.url.replace('{key}', 'KEY_PLACEHOLDER'));
  const p = u.pathname + u.search;
  return keys > 0 ? Array.from({ length: keys }, (_, i) => p.replace('KEY_PLACEHOLDER', encodeURIComponent(`${spec.keyPrefix ?? ''}${i}`))) : [p];
})();
const { hostname, port } = new URL(spec.url.replace('{key}', 'k'));
const okPerKey = new Array(paths.length).fill(0);
const errorsPerKey = new Array(paths.length).fill(0);
let nextKey = 0;

function once() {
  const k = nextKey;
  nextKey = (nextKey + 1) % paths.length;
  return new Promise((resolve) => {
    const t0 = process.hrtime.bigint();
    let done = false;
    const finish = (r) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      r.ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (r.ok) okPerKey[k]++;
      else errorsPerKey[k]++;
      resolve(r);
    };
    const req = http.request(
      {
        host: hostname,
        port,
        path: paths[k],
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('error', (e) => finish({ ok: false, kind: e.code ?? 'response error', msg: e.message }));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if (res.statusCode < 200 || res.statusCode >= 300) {
            finish({ ok: false, kind: `HTTP ${res.statusCode}`, msg: text.slice(0, 300) });
          } else if (spec.expect && !text.includes(spec.expect)) {
            finish({ ok: false, kind: 'unexpected body', msg: text.slice(0, 300) });
          } else finish({ ok: true });
        });
      },
    );
    const timer = setTimeout(() => {
      finish({ ok: false, kind: 'timeout', msg: `no answer within ${spec.requestTimeoutMs} ms` });
      req.destroy(new Error('timeout'));
    }, spec.requestTimeoutMs);
    req.on('error', (e) => finish({ ok: false, kind: e.code ?? 'request error', msg: e.message }));
    req.end(body);
  });
}

/** Timed phase: workers send until `durationMs` is over (then drain). Fixed-count phase: until `total` are sent. */
async function phase({ durationMs, total }, rec) {
  const stopAt = durationMs !== undefined ? nowMs() + durationMs : Infinity;
  let issued = 0;
  const more = () => (total !== undefined ? issued < total : nowMs() < stopAt);
  const worker = async () => {
    while (more()) {
      issued++;
      const r = await once();
      if (rec) rec(r);
      // Do not spin on a dead server: back off a little after each error (timed mode only: a burst is a burst).
      if (!r.ok && total === undefined) await sleep(20);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

function pct(sorted, p) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

const fixed = spec.total !== undefined;
if (!fixed && spec.warmupMs > 0) await phase({ durationMs: spec.warmupMs }, null);

let lat = new Float64Array(1024);
let ok = 0;
let errors = 0;
const errorKinds = {};
const errorSamples = [];
const rec = (r) => {
  if (r.ok) {
    if (ok === lat.length) {
      const n = new Float64Array(lat.length * 2);
      n.set(lat);
      lat = n;
    }
    lat[ok++] = r.ms;
  } else {
    errors++;
    errorKinds[r.kind] = (errorKinds[r.kind] ?? 0) + 1;
    if (errorSamples.length < 3) errorSamples.push(`${r.kind}: ${r.msg}`);
  }
};

const pids = spec.pids ?? {};
const tail0 = spec.metricsUrl ? await scrapeServerTail(spec.metricsUrl) : undefined;
const threads0 = spec.serverThreads && pids.server ? threadCpuMs(pids.server) : undefined;
const cpu0 = sampleCpu(pids);
const own0 = process.cpuUsage();
const t0 = nowMs();
await phase(fixed ? { total: spec.total } : { durationMs: spec.durationMs }, rec);
const t1 = nowMs();
const cpu1 = sampleCpu(pids);
const threads1 = spec.serverThreads && pids.server ? threadCpuMs(pids.server) : undefined;
const own1 = process.cpuUsage(own0);
// After the CPU sample: the scrape's own cost stays out of the server's CPU figure.
const tail1 = spec.metricsUrl ? await scrapeServerTail(spec.metricsUrl) : undefined;
agent.destroy();

const sorted = lat.subarray(0, ok).sort();
const elapsedMs = t1 - t0;
const cpuMs = {};
for (const k of Object.keys(pids)) cpuMs[k] = cpu0[k] != null && cpu1[k] != null ? cpu1[k] - cpu0[k] : null;
// Its own share of the machine: on a small one the server, the service and this compete for the cores.
cpuMs.loadgen = (own1.user + own1.system) / 1000;
let sum = 0;
for (const v of sorted) sum += v;
const out = {
  ok,
  errors,
  errorKinds,
  errorSamples,
  elapsedMs,
  rps: ok / (elapsedMs / 1000),
  latencyMs: {
    mean: ok ? sum / ok : null,
    p50: pct(sorted, 50),
    p90: pct(sorted, 90),
    p99: pct(sorted, 99),
    max: ok ? sorted[ok - 1] : null,
  },
  cpuMs,
  cpuMsPerInvocation: Object.fromEntries(Object.entries(cpuMs).map(([k, v]) => [k, v != null && ok ? v / ok : null])),
};
if (fixed) out.wallMs = elapsedMs;
const tailFigures = serverTail(tail0, tail1, ok, elapsedMs);
if (tailFigures !== undefined) out.serverTail = tailFigures;
const threadFigures = threadWindow(threads0, threads1, ok);
if (threadFigures !== undefined) out.serverThreads = threadFigures;
if (keys > 0) out.perKey = { prefix: spec.keyPrefix ?? '', ok: okPerKey, errors: errorsPerKey };
process.stdout.write(JSON.stringify(out) + '\n');
