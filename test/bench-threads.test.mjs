// The benchmark's account of a server's CPU by thread (bench/threads.mjs): read from /proc for a
// real process (this one, and a child of it), the window between two readings, rounds pooled, and the cell's note.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { poolThreadWindows, threadCpuMs, threadGroup, threadText, threadWindow } from '../bench/threads.mjs';
import { combineRows } from '../bench/rounds.mjs';

t.test('thread names are grouped without their trailing number', async (t) => {
  t.equal(threadGroup('libuv-worker'), 'libuv-worker');
  t.equal(threadGroup('rocksdb:low3'), 'rocksdb:low');
  t.equal(threadGroup('worker-12'), 'worker');
  t.equal(threadGroup('V8Worker'), 'V8Worker');
  t.equal(threadGroup('42'), '42', 'a name that is only a number stays');
});

t.test("this process's threads: the main thread's CPU grows by what it spends; a child's threads count too", async (t) => {
  const main = threadGroup(readFileSync(`/proc/self/task/${process.pid}/comm`, 'utf8').trim());
  const before = threadCpuMs(process.pid);
  t.type(before[main], 'number', `the main thread is there, as ${main}`);
  // Spun until this process has used 300 ms of CPU (not of wall time: on a busy machine it may get less).
  const spent = process.cpuUsage();
  let x = 0;
  const cpuMs = () => {
    const u = process.cpuUsage(spent);
    return (u.user + u.system) / 1000;
  };
  while (cpuMs() < 300) for (let i = 0; i < 100_000; i++) x += Math.sqrt(x + 1);
  const after = threadCpuMs(process.pid);
  const used = process.cpuUsage(spent);
  const w = threadWindow(before, after, 10);
  t.ok(w.ms[main] >= 250 && w.ms[main] <= (used.user + used.system) / 1000 + 50, `the main thread spent ${w.ms[main]} ms of the ${(used.user + used.system) / 1000} ms spun`);
  t.equal(threadCpuMs(2 ** 30), undefined, 'a process that is not there');

  // A child that spins 300 ms of CPU on a thread named differently than ours.
  const child = spawn(process.execPath, ['-e', 'require("node:fs").writeFileSync(`/proc/self/task/${process.pid}/comm`, "spinner"); const s = process.cpuUsage(); let x = 0; const ms = () => { const u = process.cpuUsage(s); return (u.user + u.system) / 1000; }; while (ms() < 300) for (let i = 0; i < 100000; i++) x += Math.sqrt(x + 1); setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  t.teardown(() => child.kill('SIGKILL'));
  let seen;
  for (let i = 0; i < 100 && !(seen?.spinner >= 250); i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    seen = threadCpuMs(process.pid);
  }
  t.ok(seen?.spinner >= 250, `the child's main thread (spinner) counted with ours: ${seen?.spinner} ms`);
});

t.test('windows: differences per group, rounds pooled, the note in ms per call', async (t) => {
  const w = threadWindow({ MainThread: 100, V8Worker: 10 }, { MainThread: 300, V8Worker: 30, 'libuv-worker': 70, idle: 0 }, 1000);
  t.same(w, { calls: 1000, ms: { MainThread: 200, V8Worker: 20, 'libuv-worker': 70 } }, 'a group seen only after counts whole; one with nothing spent is left out');
  t.equal(threadWindow(undefined, { MainThread: 1 }, 10), undefined, 'a reading missing');
  t.equal(threadWindow({}, { MainThread: 1 }, 0), undefined, 'no call answered');
  t.equal(threadText(w), 'server CPU by thread, ms per call: MainThread 0.200, libuv-worker 0.070, V8Worker 0.020 (of 0.290)');
  t.equal(threadText({ calls: 100, ms: { MainThread: 99, rare: 1 } }), 'server CPU by thread, ms per call: MainThread 0.990 (of 1.000)', 'a group under 2% is left out of the note, not of the total');
  t.equal(threadText(undefined), undefined);
  const pooled = poolThreadWindows([w, undefined, { calls: 1000, ms: { MainThread: 100 } }]);
  t.same(pooled, { calls: 2000, ms: { MainThread: 300, V8Worker: 20, 'libuv-worker': 70 } });
  t.equal(poolThreadWindows([null, undefined]), undefined);
  const row = (round, serverThreads) => ({ round, ok: 1000, errors: 0, rps: 100, latencyMs: { p99: 1 }, cpuMsPerInvocation: { server: 1 }, serverThreads });
  t.same(combineRows([row(1, w), row(2, w)]).serverThreads, { calls: 2000, ms: { MainThread: 400, V8Worker: 40, 'libuv-worker': 140 } }, "a cell's rounds add up");
});
