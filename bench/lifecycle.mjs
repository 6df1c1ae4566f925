// Startup and crash recovery of one target.
//   startup:  spawn → healthy (admin /health 200; for Restate also ingress /restate/health) on an empty data dir,
//             `runs` times, each with a fresh dir; median and max.
//   recovery: register, `/send` N × Bench/sleepy (a durable sleep), wait until all N are suspended, SIGKILL the
//             server's whole process group, start it again on the same data dir and ports, and measure
//             restart → healthy and restart → all N completed; none may be lost.
import { rmSync } from 'node:fs';
import { crashGroup, stopGroup } from './children.mjs';
import { log, median, nowMs, sleep, sqlQuery } from './common.mjs';
import { SCENARIOS, runLoad } from './scenarios.mjs';
import { newServer, probe, register, spawnServer, waitHealthy } from './targets.mjs';

export async function startupRuns(target, opts) {
  const out = { runs: [], errors: [] };
  for (let i = 0; i < opts.startupRuns; i++) {
    const s = await newServer(target, { logName: `${target}-startup`, appendLog: i > 0 });
    out.logFile = s.logFile;
    try {
      spawnServer(s);
      out.runs.push(await waitHealthy(s, { timeoutMs: opts.startTimeoutMs, intervalMs: 5 }));
    } catch (e) {
      out.errors.push(e.message);
    } finally {
      await stopGroup(s.child);
      if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
    }
  }
  out.medianMs = median(out.runs);
  out.maxMs = out.runs.length ? Math.max(...out.runs) : null;
  return out;
}

const STATUS_QUERY =
  "SELECT status, completion_result, count(*) AS n, sum(retry_count) AS retries FROM sys_invocation WHERE target_handler_name = 'sleepy' GROUP BY status, completion_result";

async function sleepyStatus(s) {
  const rows = await sqlQuery(s.admin, STATUS_QUERY);
  const by = { total: 0, retries: 0, completedOk: 0 };
  for (const r of rows) {
    by[r.status] = (by[r.status] ?? 0) + Number(r.n);
    by.total += Number(r.n);
    by.retries += Number(r.retries ?? 0);
    if (r.status === 'completed' && r.completion_result === 'success') by.completedOk += Number(r.n);
  }
  return by;
}

/** Polls sleepyStatus until pred(status) holds or the deadline passes; returns the last status seen. */
async function pollStatus(s, pred, deadline, intervalMs) {
  let last;
  let lastError;
  while (Date.now() < deadline) {
    try {
      last = await sleepyStatus(s);
      if (pred(last)) return { status: last, reached: true };
    } catch (e) {
      lastError = e.message;
    }
    await sleep(intervalMs);
  }
  return { status: last, reached: false, error: lastError };
}

export async function crashRecovery(target, node, service, opts) {
  const n = opts.recoveryCount;
  const out = { invocations: n, sleepMs: opts.recoverySleepMs };
  const s = await newServer(target, { logName: `${target}-recovery` });
  out.logFile = s.logFile;
  try {
    spawnServer(s);
    await waitHealthy(s, { timeoutMs: opts.startTimeoutMs });
    await register(s, service.url, { timeoutMs: opts.startTimeoutMs });
    await probe(s, SCENARIOS.noop, { timeoutMs: opts.startTimeoutMs, requestTimeoutMs: opts.requestTimeoutMs });

    const send = await runLoad(
      node,
      {
        url: `${s.ingress}/Bench/sleepy/send`,
        body: JSON.stringify({ ms: opts.recoverySleepMs }),
        expect: 'invocationId',
        concurrency: 32,
        total: n,
        requestTimeoutMs: opts.requestTimeoutMs,
      },
      n * opts.requestTimeoutMs + 30000,
    );
    if (send.failed) throw new Error(`sending: ${send.failed}`);
    const sentAt = nowMs();
    out.send = { ok: send.ok, errors: send.errors, wallMs: send.wallMs, errorSamples: send.errorSamples };
    // Every sleep started after its send was answered; the last one is due about sleepMs after the last send.
    const lastDueAt = sentAt + opts.recoverySleepMs;

    const susp = await pollStatus(s, (st) => (st.suspended ?? 0) >= send.ok, Date.now() + opts.recoverySleepMs, 100);
    out.atKill = susp.status;
    out.allSuspended = susp.reached;
    out.suspendedAfterSendMs = nowMs() - sentAt;
    if (!susp.reached) log(`${target}: not all suspended before the first wake-up (${JSON.stringify(susp.status)}${susp.error ? `; ${susp.error}` : ''})`);

    await crashGroup(s.child);
    log(`${target}: SIGKILLed with ${out.atKill?.suspended ?? 0} suspended; restarting on the same data dir`);
    spawnServer(s);
    out.restartToHealthyMs = await waitHealthy(s, { timeoutMs: opts.startTimeoutMs, intervalMs: 5 });
    const done = await pollStatus(s, (st) => (st.completed ?? 0) >= send.ok, Date.now() + opts.recoverySleepMs + 60000, 50);
    out.restartToCompletedMs = done.reached ? nowMs() - s.spawnedAt : null;
    out.completedAfterLastDueMs = done.reached ? nowMs() - lastDueAt : null;
    out.final = done.status;
    out.lost = send.ok - (done.status?.completedOk ?? 0);
    out.pass = done.reached && out.lost === 0 && send.errors === 0;
    if (!done.reached) out.error = `not all completed within ${opts.recoverySleepMs / 1000 + 60} s${done.error ? ` (${done.error})` : ''}`;
  } catch (e) {
    out.error = e.message;
    out.pass = false;
  } finally {
    await stopGroup(s.child);
    if (!opts.keepDirs) rmSync(s.dataDir, { recursive: true, force: true });
  }
  return out;
}
