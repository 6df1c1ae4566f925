// Where a Keel server's tail comes from, in its own words: two scrapes of its /metrics around a load cell's
// measured window give its garbage-collection pauses (`keel_gc_pause_seconds`, by kind: every pause of the
// main thread, where prom-client's `nodejs_gc_duration_seconds` counts only the first of each batch Node
// hands over) and its log batch writes (`keel_log_write_duration_seconds`, every partition, the fsync
// included when on) and its store writes (`keel_store_write_duration_seconds`: one per group commit of every
// partition's batches; their time over the window's is how busy the store was, and a store busy nearly all
// the time is what bounds a closed loop at that concurrency). A pause stops the event loop: at c=1 the call under way waits for it, so with one pause
// per N calls the pauses sit in the latencies from about p(100 - 100/N) up — at N < 100, in p99; at c=32 a
// pause holds every call in flight.

const SCRAPE_TIMEOUT_MS = 2000;
const NUMBER = String.raw`([0-9.eE+-]+|NaN|[+-]Inf)`;
const GC_LINE = new RegExp(String.raw`^keel_gc_pause_seconds_(sum|count)\{[^}]*\bkind="(\w+)"[^}]*\} ${NUMBER}$`);
const WRITE_LINE = new RegExp(String.raw`^keel_log_write_duration_seconds_(sum|count)\{[^}]*\} ${NUMBER}$`);
const STORE_LINE = new RegExp(String.raw`^keel_store_write_duration_seconds_(sum|count)\{[^}]*\} ${NUMBER}$`);

/** The counters of one scrape, since the server started: GC pauses by kind, log writes and store writes, each { count, sum_s }. */
export function parseServerTail(text) {
  const gc = {};
  const writes = { count: 0, sum_s: 0 };
  const store = { count: 0, sum_s: 0 };
  let seen = false;
  for (const line of text.split('\n')) {
    const g = GC_LINE.exec(line);
    if (g !== null) {
      gc[g[2]] ??= { count: 0, sum_s: 0 };
      gc[g[2]][g[1] === 'sum' ? 'sum_s' : 'count'] += Number(g[3]);
      seen = true;
      continue;
    }
    const w = WRITE_LINE.exec(line);
    if (w !== null) writes[w[1] === 'sum' ? 'sum_s' : 'count'] += Number(w[2]);
    const s = STORE_LINE.exec(line);
    if (s !== null) store[s[1] === 'sum' ? 'sum_s' : 'count'] += Number(s[2]);
  }
  return seen ? { gc, writes, store } : undefined;
}

/** One scrape of `url`, parsed; undefined when it cannot be had (the figures are then left out, not made up). */
export async function scrapeServerTail(url) {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(SCRAPE_TIMEOUT_MS) });
    return res.ok ? parseServerTail(await res.text()) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The window between two scrapes, `window_ms` long, for `calls` answered calls, as totals (so that rounds add
 * up: a mean is taken once, from the sums): calls, minor and major pauses and their ms, the other kinds' ms,
 * log writes and their ms, store writes and their ms, the window's ms.
 */
export function serverTail(before, after, calls, window_ms) {
  if (before === undefined || after === undefined || !(calls > 0)) return undefined;
  const zero = { count: 0, sum_s: 0 };
  const d = (a = zero, b = zero) => ({ count: a.count - b.count, ms: (a.sum_s - b.sum_s) * 1000 });
  const minor = d(after.gc.minor, before.gc.minor);
  const major = d(after.gc.major, before.gc.major);
  const others = Object.keys(after.gc).filter((k) => k !== 'minor' && k !== 'major');
  const writes = d(after.writes, before.writes);
  const store = d(after.store, before.store);
  return {
    calls,
    gcMinorPauses: minor.count,
    gcMinorMs: minor.ms,
    gcMajorPauses: major.count,
    gcMajorMs: major.ms,
    gcOtherMs: others.reduce((ms, k) => ms + d(after.gc[k], before.gc[k]).ms, 0),
    logWrites: writes.count,
    logWriteMs: writes.ms,
    storeWrites: store.count,
    storeWriteMs: store.ms,
    windowMs: window_ms > 0 ? window_ms : 0,
  };
}

/** Several windows (a cell's rounds) as one: their totals added. */
export function poolServerTails(tails) {
  const present = tails.filter((t) => t != null);
  if (present.length === 0) return undefined;
  const out = {};
  for (const t of present) for (const [k, v] of Object.entries(t)) out[k] = (out[k] ?? 0) + v;
  return out;
}

/** One line for a cell's notes: the server's pauses and writes in the window, or undefined without figures. */
export function serverTailText(t) {
  if (!t || !(t.calls > 0)) return undefined;
  const mean = (ms, n) => (n > 0 ? `${(ms / n).toFixed(2)} ms` : '-');
  const perPause = t.gcMinorPauses > 0 ? `, one per ${(t.calls / t.gcMinorPauses).toFixed(0)} calls` : '';
  const pauseMs = (t.gcMinorMs + t.gcMajorMs + t.gcOtherMs) / t.calls;
  return (
    `GC: ${t.gcMinorPauses} minor pauses (mean ${mean(t.gcMinorMs, t.gcMinorPauses)}${perPause}), ${t.gcMajorPauses} major (mean ${mean(t.gcMajorMs, t.gcMajorPauses)}), ` +
    `${pauseMs.toFixed(3)} ms of pauses per call; log writes: ${(t.logWrites / t.calls).toFixed(2)} per call, mean ${mean(t.logWriteMs, t.logWrites)}` +
    storeText(t)
  );
}

/** The store's part: its writes per call, their mean, and how busy they kept it (left out for a server without the metric). */
function storeText(t) {
  if (!(t.storeWrites > 0)) return '';
  const busy = t.windowMs > 0 ? `, busy ${((100 * t.storeWriteMs) / t.windowMs).toFixed(0)}% of the window` : '';
  return `; store writes: ${(t.storeWrites / t.calls).toFixed(2)} per call, mean ${(t.storeWriteMs / t.storeWrites).toFixed(2)} ms${busy}`;
}
