// CPU time of a process tree, read from /proc (Linux only).
import { readdirSync, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';

let clkTck = 100;
try {
  clkTck = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
} catch {
  /* keep 100 */
}

function readStat(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // comm (field 2) may contain spaces and parens: split after the last ')'.
    const rest = s.slice(s.lastIndexOf(')') + 2).split(' ');
    // rest[0] = state (field 3), rest[1] = ppid (4), rest[11..14] = utime, stime, cutime, cstime (14..17)
    return {
      pid,
      ppid: Number(rest[1]),
      pgrp: Number(rest[2]),
      ticks: Number(rest[11]) + Number(rest[12]) + Number(rest[13]) + Number(rest[14]),
    };
  } catch {
    return null;
  }
}

function allStats() {
  const out = [];
  for (const name of readdirSync('/proc')) {
    if (name.charCodeAt(0) < 48 || name.charCodeAt(0) > 57) continue;
    const st = readStat(Number(name));
    if (st) out.push(st);
  }
  return out;
}

/**
 * utime+stime (+ cutime+cstime of reaped children) of `root` and all its live descendants, in ms.
 * Returns null when root does not exist.
 */
export function treeCpuMs(root, stats = allStats()) {
  const byParent = new Map();
  let found = false;
  for (const st of stats) {
    if (st.pid === root) found = true;
    let l = byParent.get(st.ppid);
    if (!l) byParent.set(st.ppid, (l = []));
    l.push(st);
  }
  if (!found) return null;
  let ticks = 0;
  const stack = [stats.find((s) => s.pid === root)];
  while (stack.length) {
    const st = stack.pop();
    ticks += st.ticks;
    for (const c of byParent.get(st.pid) ?? []) stack.push(c);
  }
  return (ticks * 1000) / clkTck;
}

/** One /proc scan, CPU ms for each root pid (null for a missing one). */
export function sampleCpu(pids) {
  const stats = allStats();
  const out = {};
  for (const [k, pid] of Object.entries(pids)) out[k] = pid ? treeCpuMs(pid, stats) : null;
  return out;
}

/** `root` and its live descendants' pids (empty when root is gone). */
export function treePids(root, stats = allStats()) {
  if (!stats.some((s) => s.pid === root)) return [];
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const st of stats) if (st.ppid === out[i]) out.push(st.pid);
  return out;
}

/** pids of live processes in process group `pgid`. */
export function groupPids(pgid) {
  return allStats()
    .filter((s) => s.pgrp === pgid)
    .map((s) => s.pid);
}

export const CLK_TCK = clkTck;
