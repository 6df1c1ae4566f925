// The benchmark's account of a Keel cell's tail (bench/tail.mjs): two scrapes of the server's /metrics around
// the measured window give its GC pauses and log writes per call. Read off a real server here, so a renamed
// metric (prom-client's or Keel's) fails this test instead of leaving the bench's notes silently empty.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { combineRows } from '../bench/rounds.mjs';
import { parseServerTail, scrapeServerTail, serverTail, serverTailText } from '../bench/tail.mjs';
import { ingress, register, serveServices, startKeel } from './helpers/keel.mjs';

const SAMPLE = `# HELP nodejs_gc_duration_seconds Garbage collection duration by kind, one of major, minor, incremental or weakcb.
# TYPE nodejs_gc_duration_seconds histogram
nodejs_gc_duration_seconds_bucket{le="0.001",kind="minor"} 1
nodejs_gc_duration_seconds_sum{kind="minor"} 0.05
nodejs_gc_duration_seconds_count{kind="minor"} 10
nodejs_gc_duration_seconds_sum{kind="major"} 0.02
nodejs_gc_duration_seconds_count{kind="major"} 1
nodejs_gc_duration_seconds_sum{kind="incremental"} 0.001
nodejs_gc_duration_seconds_count{kind="incremental"} 3
keel_log_write_duration_seconds_sum{partition="0"} 0.5
keel_log_write_duration_seconds_count{partition="0"} 400
keel_log_write_duration_seconds_sum{partition="1"} 0.25
keel_log_write_duration_seconds_count{partition="1"} 100
keel_log_write_duration_seconds_bucket{partition="1",le="0.001"} 99
`;

t.test('one scrape: GC pauses by kind, log writes summed over partitions; nothing made up when absent', async (t) => {
  const s = parseServerTail(SAMPLE);
  t.same(s.gc.minor, { count: 10, sum_s: 0.05 });
  t.same(s.gc.major, { count: 1, sum_s: 0.02 });
  t.same(s.gc.weakcb, { count: 0, sum_s: 0 }, 'a kind not reported yet counts none');
  t.same(s.writes, { count: 500, sum_s: 0.75 }, 'every partition, buckets left out');
  t.equal(parseServerTail('keel_log_write_duration_seconds_count{partition="0"} 4\n'), undefined, 'no GC metric: not a Keel with process metrics');
  t.same(parseServerTail('# TYPE nodejs_gc_duration_seconds histogram\n').gc.minor, { count: 0, sum_s: 0 }, 'registered, no collection yet: zeros');
});

t.test('a window: the difference of two scrapes, per call; none without both or without calls', async (t) => {
  const before = parseServerTail(SAMPLE);
  const after = parseServerTail(
    SAMPLE.replace('sum{kind="minor"} 0.05', 'sum{kind="minor"} 0.09')
      .replace('count{kind="minor"} 10', 'count{kind="minor"} 14')
      .replace('count{partition="0"} 400', 'count{partition="0"} 600')
      .replace('sum{partition="0"} 0.5', 'sum{partition="0"} 0.7'),
  );
  const w = serverTail(before, after, 400);
  t.same(w, {
    gcMinorPauses: 4,
    gcMinorMeanMs: 10,
    gcMajorPauses: 0,
    gcMajorMeanMs: null,
    gcPauseMsPerCall: 0.1,
    callsPerMinorPause: 100,
    logWritesPerCall: 0.5,
    logWriteMeanMs: 1,
  });
  t.match(serverTailText(w), /GC: 4 minor pauses \(mean 10\.00 ms, one per 100 calls\), 0 major \(mean - ms\), 0\.100 ms of pauses per call; log writes: 0\.50 per call, mean 1\.000 ms/);
  t.equal(serverTail(undefined, after, 400), undefined, 'a scrape missing');
  t.equal(serverTail(before, after, 0), undefined, 'no call answered');
  t.equal(serverTailText(undefined), undefined);
});

t.test('rounds: each figure of the tail its own median', async (t) => {
  const row = (round, pauses, writes) => ({ round, ok: 100, errors: 0, rps: 100, latencyMs: { p99: 1 }, cpuMsPerInvocation: { server: 1 }, serverTail: { gcMinorPauses: pauses, logWritesPerCall: writes, gcMajorMeanMs: null } });
  const c = combineRows([row(1, 3, 2), row(2, 9, 1), row(3, 5, 3)]);
  t.same(c.serverTail, { gcMinorPauses: 5, logWritesPerCall: 2, gcMajorMeanMs: null });
});

t.test('a real Keel: its /metrics carry both, and a call at a time writes its log about twice', async (t) => {
  const keel = await startKeel(t);
  const svc = restate.service({ name: 'Tail', handlers: { noop: async () => 'ok' } });
  await register(keel, await serveServices(t, [svc]));
  const url = `${keel.admin}/metrics`;
  const before = await scrapeServerTail(url);
  t.ok(before, 'the scrape has GC figures (process metrics on)');
  const calls = 40;
  for (let i = 0; i < calls; i++) t.equal((await ingress(keel, '/Tail/noop', null)).status, 200);
  const after = await scrapeServerTail(url);
  const w = serverTail(before, after, calls);
  // One write for the invoke, one for the output and the end (two when the SDK's end comes in a later read).
  t.ok(w.logWritesPerCall >= 2 && w.logWritesPerCall <= 3, `log writes per call ${w.logWritesPerCall}`);
  t.ok(w.logWriteMeanMs > 0, `a write took ${w.logWriteMeanMs} ms on average`);
  t.ok(w.gcMinorPauses >= 0 && Number.isFinite(w.gcPauseMsPerCall), 'GC figures are counts and times');
  t.equal(await scrapeServerTail('http://127.0.0.1:9/metrics'), undefined, 'nothing listening: no figures');
});
