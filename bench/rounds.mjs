// Rounds of the load phase (`--rounds`): the targets measured in turn, several times, so that a
// machine that speeds up or slows down during the run (a shared VM here moved ±20% within minutes)
// does not decide a ratio. A cell of several rounds reports the median of each figure.
import { median } from './common.mjs';
import { poolServerTails } from './tail.mjs';
import { poolThreadWindows } from './threads.mjs';

const medianOf = (rows, pick) => {
  const keys = new Set(rows.flatMap((r) => Object.keys(pick(r) ?? {})));
  return Object.fromEntries([...keys].map((k) => [k, median(rows.map((r) => pick(r)?.[k]))]));
};

/** The order of the targets in round `round` (1-based): forward, backward, forward, ... */
export const orderOf = (targets, round) => (round % 2 === 1 ? [...targets] : [...targets].reverse());

/**
 * One load cell's rounds as one row: the median of throughput, of each latency percentile and of
 * each CPU figure; errors summed over every round; an object cell's counts correct only if they
 * were in every round. A round that could not run makes the cell an error (nothing is hidden by
 * the others), and `rounds` keeps each round's headline figures.
 */
export function combineRows(rows) {
  if (rows.length === 1) return rows[0];
  const failed = rows.find((r) => r.ok === undefined);
  if (failed) return { ...failed, error: `round ${failed.round}: ${failed.error ?? failed.failed ?? 'not run'}`, rounds: rows.map(headline) };
  const byRps = [...rows].sort((a, b) => a.rps - b.rps);
  const out = { ...byRps[(byRps.length - 1) >> 1] };
  out.rps = median(rows.map((r) => r.rps));
  out.latencyMs = medianOf(rows, (r) => r.latencyMs);
  out.cpuMsPerInvocation = medianOf(rows, (r) => r.cpuMsPerInvocation);
  // Totals over the rounds (means are taken once, from the sums): a median of each figure could mix rounds.
  if (rows.some((r) => r.serverTail)) out.serverTail = poolServerTails(rows.map((r) => r.serverTail));
  if (rows.some((r) => r.serverThreads)) out.serverThreads = poolThreadWindows(rows.map((r) => r.serverThreads));
  out.ok = rows.reduce((n, r) => n + r.ok, 0);
  out.errors = rows.reduce((n, r) => n + r.errors, 0);
  out.errorKinds = {};
  for (const r of rows) for (const [k, n] of Object.entries(r.errorKinds ?? {})) out.errorKinds[k] = (out.errorKinds[k] ?? 0) + n;
  out.errorSamples = rows.flatMap((r) => r.errorSamples ?? []).slice(0, 5);
  if (rows.some((r) => r.check)) out.check = { ...out.check, pass: rows.every((r) => r.check?.pass === true), rounds: rows.map((r) => r.check?.pass ?? null) };
  out.rounds = rows.map(headline);
  delete out.round;
  return out;
}

/** The Greeter burst's rounds: the median wall time (of the median round's row), errors summed. */
export function combineBurst(rows) {
  if (rows.length === 1) return rows[0];
  const failed = rows.find((r) => r.ok === undefined);
  if (failed) return { ...failed, error: `round ${failed.round}: ${failed.error ?? 'not run'}`, rounds: rows.map((r) => ({ round: r.round, wallMs: r.wallMs ?? null })) };
  const byWall = [...rows].sort((a, b) => a.wallMs - b.wallMs);
  const out = { ...byWall[(byWall.length - 1) >> 1] };
  out.wallMs = median(rows.map((r) => r.wallMs));
  out.errors = rows.reduce((n, r) => n + r.errors, 0);
  out.rounds = rows.map((r) => ({ round: r.round, wallMs: r.wallMs, errors: r.errors, p99: r.latencyMs?.p99 ?? null }));
  delete out.round;
  return out;
}

function headline(r) {
  return { round: r.round, rps: r.rps ?? null, p50: r.latencyMs?.p50 ?? null, p99: r.latencyMs?.p99 ?? null, cpu: r.cpuMsPerInvocation?.server ?? null, errors: r.errors ?? null };
}
