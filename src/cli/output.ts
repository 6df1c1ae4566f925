// What the CLI prints: colours only on a terminal (and never with NO_COLOR or --no-color),
// borderless aligned tables, times and ages.

import { Writable } from 'node:stream';
import Table from 'cli-table3';

export interface Colors {
  enabled: boolean;
  bold(s: string): string;
  dim(s: string): string;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  blue(s: string): string;
  magenta(s: string): string;
  cyan(s: string): string;
  gray(s: string): string;
}

/** Colours for one stream: on a TTY only, off with NO_COLOR (any non-empty value), --no-color or TERM=dumb. */
export function colorsFor(stream: { isTTY?: boolean }, allowed = true): Colors {
  const noColor = process.env.NO_COLOR !== undefined && process.env.NO_COLOR !== '';
  const enabled = allowed && !noColor && stream.isTTY === true && process.env.TERM !== 'dumb';
  const sgr = (open: number, close: number) => (s: string) => (enabled ? `\x1b[${open}m${s}\x1b[${close}m` : s);
  return {
    enabled,
    bold: sgr(1, 22),
    dim: sgr(2, 22),
    red: sgr(31, 39),
    green: sgr(32, 39),
    yellow: sgr(33, 39),
    blue: sgr(34, 39),
    magenta: sgr(35, 39),
    cyan: sgr(36, 39),
    gray: sgr(90, 39),
  };
}

const SGR = /\x1b\[[0-9;]*m/g;

export function stripSgr(s: string): string {
  return s.replace(SGR, '');
}

/**
 * The stream prompts and spinners draw on: stderr, with colour codes removed when colours are
 * off (the prompt library colours unconditionally on Node 20). Cursor movement is kept.
 */
export function promptStream(colors: boolean): NodeJS.WriteStream {
  const err = process.stderr;
  if (colors) return err;
  const w = new Writable({
    write(chunk, _enc, cb) {
      err.write(stripSgr(chunk.toString()), cb);
    },
  }) as unknown as NodeJS.WriteStream & { isTTY?: boolean };
  Object.defineProperties(w, {
    isTTY: { get: () => err.isTTY },
    columns: { get: () => err.columns },
    rows: { get: () => err.rows },
  });
  err.on('resize', () => w.emit('resize'));
  return w;
}

/** A borderless table, columns two spaces apart, header in bold. */
export function table(head: string[], rows: Array<Array<string | number | undefined | null>>, c: Colors): string {
  const t = new Table({
    head: head.map((h) => c.bold(h)),
    chars: {
      top: '', 'top-mid': '', 'top-left': '', 'top-right': '',
      bottom: '', 'bottom-mid': '', 'bottom-left': '', 'bottom-right': '',
      left: '', 'left-mid': '', mid: '', 'mid-mid': '', right: '', 'right-mid': '', middle: '  ',
    },
    style: { head: [], border: [], 'padding-left': 0, 'padding-right': 0 },
  });
  for (const r of rows) t.push(r.map((v) => (v === undefined || v === null ? '' : String(v))));
  return t
    .toString()
    .split('\n')
    .map((l) => l.replace(/\s+$/, ''))
    .join('\n');
}

/** Label: value lines, labels aligned. */
export function fields(pairs: Array<[string, string | number | undefined | null]>, c: Colors, indent = ''): string {
  const shown = pairs.filter(([, v]) => v !== undefined && v !== null && v !== '');
  const width = Math.max(0, ...shown.map(([k]) => k.length)) + 1;
  return shown.map(([k, v]) => `${indent}${c.bold(`${k}:`.padEnd(width))} ${v}`).join('\n');
}

export function ageOf(iso: unknown, now = Date.now()): string {
  if (typeof iso !== 'string') return '';
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return iso;
  const d = now - t;
  const future = d < 0;
  const a = Math.abs(d);
  const s =
    a < 1000 ? `${a}ms` : a < 60_000 ? `${Math.floor(a / 1000)}s` : a < 3_600_000 ? `${Math.floor(a / 60_000)}m` : a < 86_400_000 ? `${Math.floor(a / 3_600_000)}h` : `${Math.floor(a / 86_400_000)}d`;
  return future ? `in ${s}` : `${s} ago`;
}

/** `2026-11-22 21:38:50.273` (UTC, as stored). */
export function timeOf(iso: unknown): string {
  if (typeof iso !== 'string') return '';
  return iso.replace('T', ' ').replace(/Z$/, '');
}

export function statusColor(status: unknown, c: Colors): string {
  const s = String(status ?? '');
  switch (s) {
    case 'completed':
      return c.green(s);
    case 'running':
    case 'invoked':
      return c.cyan(s);
    case 'backing-off':
      return c.yellow(s);
    case 'paused':
      return c.red(s);
    case 'suspended':
      return c.magenta(s);
    default:
      return c.gray(s);
  }
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

export function out(text: string): void {
  process.stdout.write(text.endsWith('\n') ? text : text + '\n');
}
