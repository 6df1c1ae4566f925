// Parsing of the human units the configuration and the APIs accept.

const durationUnits_ms: Record<string, number> = {
  ms: 1, millis: 1, msec: 1, milliseconds: 1, millisecond: 1,
  s: 1000, sec: 1000, secs: 1000, second: 1000, seconds: 1000,
  m: 60_000, min: 60_000, mins: 60_000, minute: 60_000, minutes: 60_000,
  h: 3_600_000, hr: 3_600_000, hrs: 3_600_000, hour: 3_600_000, hours: 3_600_000,
  d: 86_400_000, day: 86_400_000, days: 86_400_000,
  w: 604_800_000, week: 604_800_000, weeks: 604_800_000,
};

/** "10s", "1m 30s", "500ms", "1d", "0" or ISO 8601 "PT10S"; undefined when unparseable. */
export function parseDuration_ms(text: string): number | undefined {
  const s = text.trim();
  if (s === '0') return 0;
  if (/^P/i.test(s)) return parseIsoDuration_ms(s);
  if (!/^(\d+(?:\.\d+)?\s*[a-zA-Z]+\s*)+$/.test(s)) return undefined;
  let total = 0;
  for (const m of s.matchAll(/(\d+(?:\.\d+)?)\s*([a-zA-Z]+)/g)) {
    const factor = durationUnits_ms[m[2]!.toLowerCase()];
    if (factor === undefined) return undefined;
    total += Number(m[1]) * factor;
  }
  return Math.round(total);
}

function parseIsoDuration_ms(s: string): number | undefined {
  const m = /^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/i.exec(s);
  if (!m || s.toUpperCase() === 'P' || s.toUpperCase() === 'PT') return undefined;
  const [, d, h, min, sec] = m;
  return Math.round(
    Number(d ?? 0) * 86_400_000 + Number(h ?? 0) * 3_600_000 + Number(min ?? 0) * 60_000 + Number(sec ?? 0) * 1000,
  );
}

/** Restate-style friendly rendering: "1d", "1m", "500ms", "1h 30m". */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  const parts: string[] = [];
  let rest = ms;
  for (const [unit, size] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000], ['ms', 1]] as const) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
  }
  return parts.join(' ');
}

const sizeUnits_bytes: Record<string, number> = {
  b: 1, kb: 1000, mb: 1000 ** 2, gb: 1000 ** 3,
  kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3,
};

/** "32MiB", "10 MB", "1024"; undefined when unparseable. */
export function parseSize_bytes(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  if (!m) return undefined;
  const unit = (m[2] || 'b').toLowerCase();
  const factor = sizeUnits_bytes[unit];
  return factor === undefined ? undefined : Math.round(Number(m[1]) * factor);
}
