// Log health: error- and warn-level lines and lines naming RT0010 in a server's (or the service's) log.
//   Keel logs JSON lines (pino): level >= 50 is an error, 40 a warning; any other line (Node's own
//   warnings, a crash's trace) is a warning too: nothing but JSON should be there.
//   Restate logs text (`<timestamp> ERROR <target>` then the message on the next lines, ANSI colours).
//   The SDK service logs `[restate][<time>]... ERROR: ...` lines.
import { existsSync, readFileSync } from 'node:fs';
import { stripAnsi } from './common.mjs';

const MAX_SAMPLES = 3;

function sample(list, text) {
  const t = text.trim().slice(0, 200);
  if (list.length < MAX_SAMPLES && !list.includes(t)) list.push(t);
}

/** `{errors, warnings, rt0010, errorSamples, warnSamples}` for one log file (zeros when there is none). */
export function countLog(file, kind) {
  const out = { errors: 0, warnings: 0, rt0010: 0, errorSamples: [], warnSamples: [] };
  if (!file || !existsSync(file)) return out;
  const lines = stripAnsi(readFileSync(file, 'utf8')).split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (!line) continue;
    if (line.includes('RT0010')) out.rt0010++;
    let level = null;
    let msg = line;
    if (kind === 'keel') {
      try {
        const j = JSON.parse(line);
        level = j.level >= 50 ? 'error' : j.level >= 40 ? 'warn' : null;
        msg = `${j.code ? `${j.code} ` : ''}${j.msg ?? ''}${j.err?.message ? `: ${j.err.message}` : ''}`;
      } catch {
        level = 'warn';
        msg = `not a log line: ${line}`;
      }
    } else if (kind === 'restate') {
      const m = /^\d{4}-\d\d-\d\dT\S+\s+(ERROR|WARN)\s+(\S+)/.exec(line);
      if (!m) continue;
      level = m[1] === 'ERROR' ? 'error' : 'warn';
      // `<target>` then the message on the next line, then its fields indented further (the first one says most).
      const field = /^ {4}\S/.test(lines[i + 2] ?? '') ? ` (${lines[i + 2].trim()})` : '';
      msg = `${m[2]}: ${(lines[i + 1] ?? '').trim()}${field}`;
    } else {
      const m = /\]\s*(ERROR|WARN):/.exec(line);
      if (!m) continue;
      level = m[1] === 'ERROR' ? 'error' : 'warn';
    }
    if (level === 'error') {
      out.errors++;
      sample(out.errorSamples, msg);
    } else if (level === 'warn') {
      out.warnings++;
      sample(out.warnSamples, msg);
    }
  }
  return out;
}

export function addCounts(a, b) {
  const out = { errors: a.errors + b.errors, warnings: a.warnings + b.warnings, rt0010: a.rt0010 + b.rt0010, errorSamples: [...a.errorSamples], warnSamples: [...a.warnSamples] };
  for (const s of b.errorSamples) sample(out.errorSamples, s);
  for (const s of b.warnSamples) sample(out.warnSamples, s);
  return out;
}

/** Log health of one target over its phases: `{phases: {load, startup, recovery, service}, server: total of the server's phases}`. */
export function logHealth(target, files) {
  const kind = target === 'restate' ? 'restate' : 'keel';
  const phases = {};
  let server = countLog(null, kind);
  for (const [phase, file] of Object.entries(files)) {
    if (!file) continue;
    phases[phase] = countLog(file, phase === 'service' ? 'sdk' : kind);
    phases[phase].file = file;
    if (phase !== 'service') server = addCounts(server, phases[phase]);
  }
  return { phases, server };
}
