// Where a Keel server's tail comes from, in its own words: two scrapes of its /metrics around a load cell's
// measured window give its garbage-collection pauses (prom-client's `nodejs_gc_duration_seconds`, by kind)
// and its log batch writes (`keel_log_write_duration_seconds`, every partition, the fsync included when on).
// A pause stops the event loop: at c=1 the call under way waits for it, so with one pause per N calls the
// pauses sit in the latencies from about p(100 - 100/N) up — at N < 100, in p99.

/** GC kinds prom-client reports (minor: scavenges; major: mark-compact; incremental: marking steps). */
const GC_KINDS = ['minor', 'major', 'incremental', 'weakcb'];
const SCRAPE_TIMEOUT_MS = 2000;
const NUMBER = String.raw`([0-9.eE+-]+|NaN|[+-]Inf)`;
const GC_TYPE = '# TYPE nodejs_gc_duration_seconds ';
const GC_LINE = new RegExp(String.raw`^nodejs_gc_duration_seconds_(sum|count)\{kind="(\w+)"\} ${NUMBER}$`);
const WRITE_LINE = new RegExp(String.raw`^keel_log_write_duration_seconds_(sum|count)\{[^}]*\} ${NUMBER}$`);

/** The counters of one scrape: GC pauses by kind and log writes, each as { count, sum_s } since the start. */
export function parseServerTail(text) {
  const gc = Object.fromEntries(GC_KINDS.map((k) => [k, { count: 0, sum_s: 0 }]));
  const writes = { count: 0, sum_s: 0 };
  let seen = false;
  for (const line of text.split('\n')) {
    // Registered (process metrics on) yet without samples until the first collection: then zeros are true.
    if (line.startsWith(GC_TYPE)) seen = true;
    const g = GC_LINE.exec(line);
    if (g !== null && gc[g[2]] !== undefined) {
      gc[g[2]][g[1] === 'sum' ? 'sum_s' : 'count'] += Number(g[3]);
      continue;
    }
    const w = WRITE_LINE.exec(line);
    if (w !== null) writes[w[1] === 'sum' ? 'sum_s' : 'count'] += Number(w[2]);
  }
  return seen ? { gc, writes } : undefined;
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

const round = (v, digits) => (Number.isFinite(v) ? Number(v.toFixed(digits)) : null);

/** The window between two scrapes, for `calls` answered calls: flat figures, so that rounds can take medians. */
export function serverTail(before, after, calls) {
  if (before === undefined || after === undefined || !(calls > 0)) return undefined;
  const d = (a, b) => ({ count: a.count - b.count, ms: (a.sum_s - b.sum_s) * 1000 });
  const minor = d(after.gc.minor, before.gc.minor);
  const major = d(after.gc.major, before.gc.major);
  const incremental = d(after.gc.incremental, before.gc.incremental);
  const writes = d(after.writes, before.writes);
  const pauseMs = minor.ms + major.ms + incremental.ms;
  return {
    gcMinorPauses: minor.count,
    gcMinorMeanMs: minor.count > 0 ? round(minor.ms / minor.count, 3) : null,
    gcMajorPauses: major.count,
    gcMajorMeanMs: major.count > 0 ? round(major.ms / major.count, 3) : null,
    gcPauseMsPerCall: round(pauseMs / calls, 4),
    callsPerMinorPause: minor.count > 0 ? round(calls / minor.count, 1) : null,
    logWritesPerCall: round(writes.count / calls, 3),
    logWriteMeanMs: writes.count > 0 ? round(writes.ms / writes.count, 3) : null,
  };
}

/** One line for a cell's notes: the server's pauses and writes in the window, or undefined without figures. */
export function serverTailText(t) {
  if (!t) return undefined;
  const fmt = (v, digits) => (v == null ? '-' : v.toFixed(digits));
  const perPause = t.callsPerMinorPause == null ? '' : `, one per ${fmt(t.callsPerMinorPause, 0)} calls`;
  return (
    `GC: ${t.gcMinorPauses} minor pauses (mean ${fmt(t.gcMinorMeanMs, 2)} ms${perPause}), ${t.gcMajorPauses} major (mean ${fmt(t.gcMajorMeanMs, 2)} ms), ` +
    `${fmt(t.gcPauseMsPerCall, 3)} ms of pauses per call; log writes: ${fmt(t.logWritesPerCall, 2)} per call, mean ${fmt(t.logWriteMeanMs, 3)} ms`
  );
}
