// The benchmark's account of a Keel cell's tail (bench/tail.mjs): two scrapes of the server's /metrics around
// the measured window give its GC pauses and log writes per call. Read off a real server here, so a renamed
// metric fails this test instead of leaving the bench's notes silently empty.
import t from 'tap';
import * as restate from '@restatedev/restate-sdk';
import { combineRows } from '../bench/rounds.mjs';
import { parseServerTail, poolServerTails, scrapeServerTail, serverTail, serverTailText } from '../bench/tail.mjs';
import { ingress, register, serveServices, startKeel } from './helpers/keel.mjs';

const SAMPLE = `# HELP keel_gc_pause_seconds Every pause of the main thread for garbage collection
# TYPE keel_gc_pause_seconds histogram
keel_gc_pause_seconds_bucket{kind="minor",le="0.001"} 1
keel_gc_pause_seconds_sum{kind="minor"} 0.05
keel_gc_pause_seconds_count{kind="minor"} 10
keel_gc_pause_seconds_sum{kind="major"} 0.02
keel_gc_pause_seconds_count{kind="major"} 1
keel_gc_pause_seconds_sum{node="n1",kind="incremental"} 0.001
keel_gc_pause_seconds_count{node="n1",kind="incremental"} 3
nodejs_gc_duration_seconds_count{kind="minor"} 7
keel_log_write_duration_seconds_sum{partition="0"} 0.5
keel_log_write_duration_seconds_count{partition="0"} 400
keel_log_write_duration_seconds_sum{partition="1"} 0.25
keel_log_write_duration_seconds_count{partition="1"} 100
keel_log_write_duration_seconds_bucket{partition="1",le="0.001"} 99
keel_store_write_duration_seconds_sum{synced="true"} 0.3
keel_store_write_duration_seconds_count{synced="true"} 300
keel_store_write_duration_seconds_sum{synced="false"} 0.01
keel_store_write_duration_seconds_count{synced="false"} 20
keel_store_write_duration_seconds_bucket{synced="false",le="0.001"} 20
`;

t.test('one scrape: GC pauses by kind (other labels allowed), log writes summed over partitions; nothing made up when absent', async (t) => {
  const s = parseServerTail(SAMPLE);
  t.same(s.gc.minor, { count: 10, sum_s: 0.05 }, "Keel's count, not prom-client's");
  t.same(s.gc.major, { count: 1, sum_s: 0.02 });
  t.same(s.gc.incremental, { count: 3, sum_s: 0.001 }, 'a label before kind');
  t.same(s.writes, { count: 500, sum_s: 0.75 }, 'every partition, buckets left out');
  t.same(s.store, { count: 320, sum_s: 0.31 }, 'store writes synced and not, buckets left out');
  t.equal(parseServerTail('keel_log_write_duration_seconds_count{partition="0"} 4\n# TYPE keel_gc_pause_seconds histogram\n'), undefined, 'no GC figures: no tail');
});

t.test('a window: totals between two scrapes; the note takes each mean once; none without both or without calls', async (t) => {
  const before = parseServerTail(SAMPLE);
  const after = parseServerTail(
    SAMPLE.replace('sum{kind="minor"} 0.05', 'sum{kind="minor"} 0.09')
      .replace('count{kind="minor"} 10', 'count{kind="minor"} 14')
      .replace('count{partition="0"} 400', 'count{partition="0"} 600')
      .replace('sum{partition="0"} 0.5', 'sum{partition="0"} 0.7')
      .replace('sum{synced="true"} 0.3', 'sum{synced="true"} 0.45')
      .replace('count{synced="true"} 300', 'count{synced="true"} 400'),
  );
  const w = serverTail(before, after, 400, 250);
  t.equal(w.calls, 400);
  t.equal(w.gcMinorPauses, 4);
  t.ok(Math.abs(w.gcMinorMs - 40) < 1e-9, `${w.gcMinorMs} ms of minor pauses`);
  t.same([w.gcMajorPauses, w.gcMajorMs, w.gcOtherMs, w.logWrites], [0, 0, 0, 200]);
  t.match(serverTailText(w), /GC: 4 minor pauses \(mean 10\.00 ms, one per 100 calls\), 0 major \(mean -\), 0\.100 ms of pauses per call; log writes: 0\.50 per call, mean 1\.00 ms; store writes: 0\.25 per call, mean 1\.50 ms, busy 60% of the window$/);
  t.notMatch(serverTailText({ ...w, storeWrites: 0, storeWriteMs: 0 }), /store/, 'a server without store figures: none shown');
  t.equal(serverTail(undefined, after, 400), undefined, 'a scrape missing');
  t.equal(serverTail(before, after, 0), undefined, 'no call answered');
  t.equal(serverTailText(undefined), undefined);
});

t.test('rounds: the totals pooled, so the note never mixes one round\'s count with another\'s mean', async (t) => {
  const tail = (calls, pauses, ms) => ({ calls, gcMinorPauses: pauses, gcMinorMs: ms, gcMajorPauses: 0, gcMajorMs: 0, gcOtherMs: 0, logWrites: 2 * calls, logWriteMs: calls, storeWrites: calls, storeWriteMs: calls / 2, windowMs: calls * 10 });
  const row = (round, t) => ({ round, ok: 100, errors: 0, rps: 100, latencyMs: { p99: 1 }, cpuMsPerInvocation: { server: 1 }, serverTail: t });
  const c = combineRows([row(1, tail(100, 0, 0)), row(2, tail(100, 0, 0)), row(3, tail(200, 3, 12))]);
  t.same(c.serverTail, tail(400, 3, 12));
  t.match(serverTailText(c.serverTail), /3 minor pauses \(mean 4\.00 ms, one per 133 calls\)/);
  t.match(serverTailText(c.serverTail), /store writes: 1\.00 per call, mean 0\.50 ms, busy 5% of the window/, 'busy: all rounds\' store time over all their windows');
  t.equal(poolServerTails([undefined, null]), undefined);
});

t.test('a real Keel: its /metrics carry all three, and a call at a time writes its log about twice, nearly one store write each', async (t) => {
  const keel = await startKeel(t);
  const svc = restate.service({ name: 'Tail', handlers: { noop: async () => 'ok' } });
  await register(keel, await serveServices(t, [svc]));
  const url = `${keel.admin}/metrics`;
  const before = await scrapeServerTail(url);
  t.ok(before, 'the scrape has GC figures');
  // Enough calls (~100 KB allocated each) for the young generation to be collected a few times.
  const calls = 300;
  let ok = 0;
  for (let i = 0; i < calls; i++) ok += (await ingress(keel, '/Tail/noop', null)).status === 200 ? 1 : 0;
  t.equal(ok, calls, 'every call answered');
  const after = await scrapeServerTail(url);
  const w = serverTail(before, after, calls, 1000);
  t.ok(w.gcMinorPauses > 0 && w.gcMinorMs > 0, `minor pauses counted (${w.gcMinorPauses}, ${w.gcMinorMs.toFixed(1)} ms)`);
  // One write for the invoke, one for the output and the end (two when the SDK's end comes in a later read).
  const perCall = w.logWrites / calls;
  t.ok(perCall >= 2 && perCall <= 3, `log writes per call ${perCall}`);
  t.ok(w.logWriteMs > 0, `${(w.logWriteMs / w.logWrites).toFixed(3)} ms per write`);
  // A call at a time: nearly every log write is a store write of its own (a group commit of one; two
  // partitions' batches of one tick share one).
  t.ok(w.storeWrites <= w.logWrites && w.storeWrites >= 0.9 * w.logWrites, `store writes ${w.storeWrites}, log writes ${w.logWrites}`);
  t.ok(w.storeWriteMs > 0 && w.storeWriteMs <= w.logWriteMs, `${(w.storeWriteMs / w.storeWrites).toFixed(3)} ms per store write, within the log write that waited for it`);
  t.equal(await scrapeServerTail('http://127.0.0.1:9/metrics'), undefined, 'nothing listening: no figures');
});
