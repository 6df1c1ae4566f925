// A server's CPU in a cell, by thread (Linux only): where it goes, not only how much. Threads are
// named by their role and added up by that name without its trailing number. Node: MainThread (the
// event loop: JavaScript, syscalls), V8Worker (GC helpers), libuv-worker (the thread pool: Keel's
// store writes, and LevelDB's compaction thread, which inherits the name of the thread that
// started it). Restate names its tokio and RocksDB threads likewise. The server's child processes count
// too (Keel's query engine; the restate-server wrapper's server, where the wrapper is what was started). A
// thread that ends during the window takes its CPU with it (threads have no cutime).
import { readdirSync, readFileSync } from 'node:fs';
import { CLK_TCK, treePids } from './proc.mjs';

/** A thread's name as a group: without a trailing number and what separates it (`rocksdb:low3`, `worker-12`). */
export const threadGroup = (name) => name.replace(/[-_:.# ]*\d+$/, '') || name;

/** CPU ms (user + system) of each thread group of `root` and its descendants, or undefined when it is gone. */
export function threadCpuMs(root) {
  const pids = treePids(root);
  if (pids.length === 0) return undefined;
  const out = {};
  for (const pid of pids) addThreads(pid, out);
  return out;
}

function addThreads(pid, out) {
  let tids;
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return; // ended since the scan
  }
  for (const tid of tids) {
    let stat;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // ended between the listing and the read
    }
    // comm (field 2) may hold spaces and parens: the fields after it follow the last ')'.
    const name = threadGroup(stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')));
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    out[name] = (out[name] ?? 0) + ((Number(rest[11]) + Number(rest[12])) * 1000) / CLK_TCK;
  }
}

/** Two readings around a window of `calls` answered calls, as totals (rounds add up), or undefined. */
export function threadWindow(before, after, calls) {
  if (before === undefined || after === undefined || !(calls > 0)) return undefined;
  const ms = {};
  for (const [name, total] of Object.entries(after)) {
    const d = total - (before[name] ?? 0);
    if (d > 0) ms[name] = d;
  }
  return { calls, ms };
}

/** Several windows (a cell's rounds) as one. */
export function poolThreadWindows(windows) {
  const present = windows.filter((w) => w != null);
  if (present.length === 0) return undefined;
  const out = { calls: 0, ms: {} };
  for (const w of present) {
    out.calls += w.calls;
    for (const [name, ms] of Object.entries(w.ms)) out.ms[name] = (out.ms[name] ?? 0) + ms;
  }
  return out;
}

/** The groups that took at least 2% of the total, largest first, in ms per call; undefined without figures. */
export function threadText(w) {
  if (!w || !(w.calls > 0)) return undefined;
  const total = Object.values(w.ms).reduce((a, b) => a + b, 0);
  if (!(total > 0)) return undefined;
  const shown = Object.entries(w.ms)
    .filter(([, ms]) => ms >= total * 0.02)
    .sort((a, b) => b[1] - a[1])
    .map(([name, ms]) => `${name} ${(ms / w.calls).toFixed(3)}`);
  return `server CPU by thread, ms per call: ${shown.join(', ')} (of ${(total / w.calls).toFixed(3)})`;
}
