// When a schedule fires (Keel's own schedules): a cron expression in a time zone, or a fixed
// interval. Pure functions of their arguments, so the fold can call them: the same log gives
// the same firings on every replica (the time zone rules are the runtime's ICU data).
//
// Cron expressions are croner's: 5 fields (minute hour day month weekday) or 6 (seconds
// first), with `L` (last day of the month), `#` (nth weekday), ranges, steps and names.
// Around daylight-saving changes, a wall time in the hour skipped in spring fires once at the
// end of the gap (02:30 on a day going 02:00 → 03:00 fires at 03:00), and a wall time that
// happens twice in autumn fires once, at its first occurrence; hourly and finer expressions
// fire every real hour. A day that a month lacks (the 31st) is skipped in that month.
import { Cron } from 'croner';
import { assert } from './assert.js';

export interface ScheduleTimes {
  cron?: string | undefined;
  timezone?: string | undefined;
  every_ms?: number | undefined;
  /** Where an interval counts from (its firings are anchor + k × every_ms). */
  anchor_ms: number;
}

/** The shortest interval a schedule may have: a firing is a log command and an invocation. */
export const MIN_EVERY_MS = 1000;
/** A firing this long past its time (the server was down) is a missed one, unless the schedule says otherwise. */
export const DEFAULT_LATE_AFTER_MS = 60_000;
/** The most firings one computation walks (missed firings to catch up with, a listing). */
export const MAX_FIRINGS_WALKED = 1000;

// Parsed expressions, by expression and zone: the fold asks for the next firing at every one.
const parsed = new Map<string, Cron>();
const MAX_PARSED = 1024;

function cronOf(expression: string, timezone: string | undefined): Cron {
  const key = `${timezone ?? ''} ${expression}`;
  let c = parsed.get(key);
  if (c === undefined) {
    c = new Cron(expression, { paused: true, timezone: timezone || 'UTC', mode: '5-or-6-parts' });
    if (parsed.size >= MAX_PARSED) parsed.delete(parsed.keys().next().value!);
    parsed.set(key, c);
  }
  return c;
}

/**
 * Why a cron expression or time zone cannot be used, or undefined when it can: 5 or 6 fields (or
 * a nickname such as @daily), and some firing after `after_ms`. (croner would also take an ISO
 * date as a one-time "pattern": that is no schedule.)
 */
export function cronProblem(expression: string, timezone: string | undefined, after_ms = 0): string | undefined {
  const fields = expression.trim().split(/\s+/);
  if (!expression.trim().startsWith('@') && (fields.length < 5 || fields.length > 6 || expression.includes(':'))) {
    return `the cron expression '${expression}' is not valid: it takes 5 fields (minute hour day month weekday) or 6 (seconds first)`;
  }
  try {
    const next = cronOf(expression, timezone).nextRun(new Date(after_ms));
    if (next === null) return `the cron expression '${expression}' never fires again`;
    return undefined;
  } catch (err) {
    return `the cron expression '${expression}'${timezone ? ` in time zone '${timezone}'` : ''} is not valid: ${(err as Error).message}`;
  }
}

/** The first firing strictly after `after_ms`, or undefined when there is none (a cron that ended). */
export function nextFiring(t: ScheduleTimes, after_ms: number): number | undefined {
  if (t.cron) {
    const next = cronOf(t.cron, t.timezone).nextRun(new Date(after_ms));
    return next === null ? undefined : next.getTime();
  }
  const every = t.every_ms ?? 0;
  assert(every >= MIN_EVERY_MS, () => `schedule interval of ${every} ms`);
  if (after_ms < t.anchor_ms) return t.anchor_ms;
  return t.anchor_ms + (Math.floor((after_ms - t.anchor_ms) / every) + 1) * every;
}

/**
 * The firings from `from_ms` (included) to `to_ms` (included), in order, at most `limit`, and how
 * many more there were past the limit.
 */
export function firingsBetween(t: ScheduleTimes, from_ms: number, to_ms: number, limit = MAX_FIRINGS_WALKED): { times: number[]; more: number } {
  const times: number[] = [];
  let more = 0;
  for (let at = nextFiring(t, from_ms - 1); at !== undefined && at <= to_ms; at = nextFiring(t, at)) {
    if (times.length < limit) times.push(at);
    else if (++more >= MAX_FIRINGS_WALKED) break; // a bound on the walk: "at least this many"
  }
  return { times, more };
}

