// Child processes in their own process groups: spawned detached, stopped (or SIGKILLed) as a whole group,
// and all killed when the benchmark exits or is interrupted.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { ROOT, log, sleep } from './common.mjs';
import { groupPids } from './proc.mjs';

const groups = new Set(); // process-group leaders we started and have not stopped

export function spawnGroup(cmd, args, { env, logFile, cwd = ROOT, stdout = true }) {
  const fd = openSync(logFile, 'a');
  const child = spawn(cmd, args, {
    cwd,
    env,
    detached: true, // own process group: we can kill the whole tree
    stdio: ['ignore', stdout ? fd : 'ignore', fd],
  });
  closeSync(fd);
  child.exited = null;
  child.exitPromise = new Promise((res) => {
    child.on('exit', (code, signal) => {
      child.exited = { code, signal };
      res(child.exited);
    });
    child.on('error', (e) => {
      child.exited = { code: null, signal: null, error: e.message };
      res(child.exited);
    });
  });
  if (child.pid) groups.add(child.pid);
  return child;
}

function signalGroup(pgid, sig) {
  try {
    process.kill(-pgid, sig);
  } catch {
    /* gone */
  }
}

async function waitGroupGone(pgid, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline && groupPids(pgid).length > 0) await sleep(20);
  return groupPids(pgid).length === 0;
}

/** SIGTERM the group's leader (it stops its own children), SIGKILL what is left of the group after `graceMs`. */
export async function stopGroup(child, graceMs = 8000) {
  if (!child?.pid) return;
  const pgid = child.pid;
  try {
    process.kill(pgid, 'SIGTERM');
  } catch {
    /* gone */
  }
  if (!(await waitGroupGone(pgid, graceMs))) {
    log(`process group ${pgid} still alive after ${graceMs} ms, SIGKILL`);
    signalGroup(pgid, 'SIGKILL');
    await waitGroupGone(pgid, 3000);
  }
  groups.delete(pgid);
}

/** SIGKILL the whole group at once (a crash); resolves once every process of it is gone. */
export async function crashGroup(child) {
  if (!child?.pid) return;
  signalGroup(child.pid, 'SIGKILL');
  await waitGroupGone(child.pid, 10000);
  groups.delete(child.pid);
}

function killAllNow() {
  for (const pgid of groups) signalGroup(pgid, 'SIGKILL');
  groups.clear();
}
process.on('exit', killAllNow);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    log(`got ${sig}, killing servers`);
    killAllNow();
    process.exit(130);
  });
}
