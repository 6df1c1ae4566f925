// `keel invocations describe`: the journal as a timeline, and for a journal mismatch (RT0016)
// the recorded entry beside the one the new attempt tried to write.
//
// Where the "new" side comes from: the SDK's error names the command the attempt was executing
// (Keel stores it as last_failure_related_entry_type/_name/_index, the index counting commands
// only) and its message says what differs. The SDK messages seen (TypeScript SDK 1.17, its
// shared core; the Rust core writes the same text):
//
//   type mismatch:    - The previous execution ran and recorded the following: 'sleep' (index '1')
//                     - The current execution attempts to perform the following: 'run'
//   content mismatch: - The mismatch happened while executing 'run' (index '1')
//                     - Difference:
//                        name: charge != charge-v2          (recorded != new)
//   await mismatch:   'await' could not be replayed. ... Notifications awaited on this await point:
//                      - completion id 3
//
// The type-mismatch text has its two labels swapped in some SDK versions (the "recorded" label
// names what this attempt did): the recorded journal decides which label is which.

import type { Row } from './admin.js';
import { ageOf, table, timeOf, type Colors } from './output.js';

export interface MismatchSide {
  entry_type?: string;
  name?: string;
  /** The SDK's own label ('run', 'sleep', 'handler return'). */
  label?: string;
}

export interface Mismatch {
  kind: 'type' | 'content' | 'await' | 'unknown';
  /** Index among the commands (what the SDK reports). */
  command_index?: number;
  /** Index in sys_journal (commands and notifications). */
  journal_index?: number;
  recorded: MismatchSide;
  new: MismatchSide;
  /** Fields that differ, for a content mismatch. */
  differences: Array<{ field: string; recorded: string; new: string }>;
  /** Extra lines of the SDK message (awaited notifications). */
  notes: string[];
  /** The SDK message names the two sides the other way round (its labels are swapped). */
  labels_swapped: boolean;
  message: string;
}

const ALIASES: Record<string, string> = { handlerreturn: 'output', send: 'onewaycall', sendsignal: 'sendsignal' };

/** 'Command: GetLazyState' and 'get state' both become 'getstate'. */
export function normaliseEntryName(s: string): string {
  const n = s
    .toLowerCase()
    .replace(/^(command|notification):\s*/, '')
    .replace(/[^a-z]/g, '')
    .replace(/lazy|eager/g, '');
  return ALIASES[n] ?? n;
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

function num(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'string' && /^\d+$/.test(v)) return Number(v);
  return undefined;
}

function failureText(inv: Row): string {
  const m = str(inv.last_failure) ?? '';
  return m.replace(/^\[[A-Z]+\d+\]\s*/, '');
}

export function isMismatch(inv: Row): boolean {
  return inv.last_failure_error_code === 'RT0016' || /^\[RT0016\]/.test(str(inv.last_failure) ?? '');
}

/** The journal row of the `commandIndex`-th command (0 = the input). */
export function commandRow(journal: Row[], commandIndex: number): Row | undefined {
  const commands = journal.filter((r) => String(r.entry_type ?? '').startsWith('Command:'));
  return commands[commandIndex];
}

export function analyseMismatch(inv: Row, journal: Row[]): Mismatch | undefined {
  if (!isMismatch(inv)) return undefined;
  const message = failureText(inv);
  const m: Mismatch = { kind: 'unknown', recorded: {}, new: {}, differences: [], notes: [], labels_swapped: false, message };
  const typeLabels = readFailureMessage(m, message);

  const related = num(inv.last_failure_related_entry_index) ?? num(inv.last_failure_related_command_index);
  m.command_index ??= related;
  const recordedRow = m.command_index !== undefined ? commandRow(journal, m.command_index) : undefined;
  if (recordedRow) {
    m.journal_index = num(recordedRow.index);
    m.recorded.entry_type = str(recordedRow.entry_type);
    m.recorded.name = str(recordedRow.name);
  }

  // The new side: the command the SDK says it was executing.
  m.new.entry_type = str(inv.last_failure_related_entry_type) ?? str(inv.last_failure_related_command_type);
  m.new.name = str(inv.last_failure_related_entry_name) ?? str(inv.last_failure_related_command_name);

  if (typeLabels !== undefined) sortTypeLabels(m, typeLabels[0], typeLabels[1]);
  if (m.kind === 'content' && m.new.name === undefined) {
    const nameDiff = m.differences.find((d) => d.field === 'name');
    if (nameDiff) m.new.name = nameDiff.new;
  }
  if (m.kind === 'content' && m.new.entry_type === undefined) m.new.entry_type = m.recorded.entry_type;
  return m;
}

/**
 * What the SDK's message says: the kind of mismatch, the command's index, a content mismatch's
 * differences, an await's notes. A type mismatch's two labels are returned unsorted: which one
 * is the recorded command's is decided against the journal (sortTypeLabels).
 */
function readFailureMessage(m: Mismatch, message: string): [string, string] | undefined {
  const typeM = /recorded the following: '([^']*)'(?: \(index '(\d+)'\))?[^\n]*\n\s*-\s*The current execution attempts to perform the following: '([^']*)'/.exec(message);
  const contentM = /mismatch happened (?:at index '(\d+)' )?while executing '([^']*)'(?: \(index '(\d+)'\))?[\s\S]*?Difference:([\s\S]*)$/.exec(message);
  if (typeM) {
    m.kind = 'type';
    m.command_index = num(typeM[2]);
    return [typeM[1]!, typeM[3]!];
  }
  if (contentM) {
    m.kind = 'content';
    m.command_index = num(contentM[3] ?? contentM[1]);
    m.new.label = contentM[2];
    m.recorded.label = contentM[2];
    for (const line of contentM[4]!.split('\n')) {
      const d = /^\s*([^:]+?):\s(.*?)\s!=\s(.*)$/.exec(line);
      if (d) m.differences.push({ field: d[1]!.trim(), recorded: d[2]!, new: d[3]! });
    }
  } else if (/'await' could not be replayed/.test(message)) {
    m.kind = 'await';
    const at = message.indexOf('awaited on this await point:');
    if (at >= 0) {
      m.notes = message
        .slice(at + 'awaited on this await point:'.length)
        .split('\n')
        .map((l) => l.replace(/^\s*-\s*/, '').trim())
        .filter(Boolean);
    }
  }
  return undefined;
}

/** A type mismatch's labels `a` and `b`, put on the recorded and the new side by the journal's recorded command. */
function sortTypeLabels(m: Mismatch, a: string, b: string): void {
  const rec = m.recorded.entry_type ? normaliseEntryName(m.recorded.entry_type) : undefined;
  if (rec !== undefined && normaliseEntryName(b) === rec && normaliseEntryName(a) !== rec) {
    // labels swapped: the "recorded" label is what this attempt did
    m.recorded.label = b;
    m.new.label = a;
    m.labels_swapped = true;
  } else if (rec !== undefined && normaliseEntryName(a) === rec) {
    m.recorded.label = a;
    m.new.label = b;
  } else {
    const neu = m.new.entry_type ? normaliseEntryName(m.new.entry_type) : undefined;
    const swapped = neu !== undefined && normaliseEntryName(a) === neu;
    m.recorded.label = swapped ? b : a;
    m.new.label = swapped ? a : b;
    m.labels_swapped = swapped;
  }
  // A related command of the recorded type is not the new one: trust the labels.
  if (m.new.entry_type && rec !== undefined && normaliseEntryName(m.new.entry_type) === rec && normaliseEntryName(m.new.label) !== rec) {
    m.new.entry_type = undefined;
    m.new.name = undefined;
  }
}

function entryDetail(r: Row, now: number): string {
  const parts: string[] = [];
  if (str(r.invoked_target)) parts.push(`→ ${r.invoked_target}`);
  if (str(r.invoked_id)) parts.push(String(r.invoked_id));
  if (str(r.sleep_wakeup_at)) parts.push(`until ${timeOf(r.sleep_wakeup_at)} (${ageOf(r.sleep_wakeup_at, now)})`);
  if (str(r.promise_name)) parts.push(`promise ${r.promise_name}`);
  return parts.join('  ');
}

function relative(at: unknown, origin: number | undefined): string {
  if (typeof at !== 'string' || origin === undefined) return '';
  const t = Date.parse(at);
  if (!Number.isFinite(t)) return '';
  const d = t - origin;
  return d < 1000 ? `+${d}ms` : d < 60_000 ? `+${(d / 1000).toFixed(1)}s` : `+${Math.round(d / 1000)}s`;
}

/** The journal, oldest first, one line per entry. */
export function renderTimeline(journal: Row[], inv: Row, mismatch: Mismatch | undefined, c: Colors, now = Date.now()): string {
  if (journal.length === 0) return c.dim('  (no journal entries)');
  const created = typeof inv.created_at === 'string' ? Date.parse(inv.created_at) : undefined;
  const timed = journal.some((r) => typeof r.appended_at === 'string');
  const rows = journal.map((r) => {
    const idx = num(r.index);
    const isMismatchRow = mismatch?.journal_index !== undefined && idx === mismatch.journal_index;
    const type = String(r.entry_type ?? '');
    const notification = type.startsWith('Notification:');
    const pending = r.completed === false;
    const glyph = isMismatchRow ? c.red('✗') : pending ? c.yellow('○') : notification ? c.dim('◆') : c.green('●');
    const status = isMismatchRow ? c.red('mismatch on replay') : r.completed === true ? c.green('completed') : pending ? c.yellow('pending') : '';
    const name = str(r.name) ? `"${r.name}"` : '';
    const at = timed ? [relative(r.appended_at, Number.isFinite(created) ? created : undefined)] : [];
    return [c.dim(String(idx ?? '')), ...at, `${glyph} ${notification ? c.dim(type) : type}`, name, status, entryDetail(r, now)];
  });
  return table(['#', ...(timed ? ['AT'] : []), 'ENTRY', 'NAME', 'STATE', 'DETAIL'], rows, c)
    .split('\n')
    .map((l) => `  ${l}`)
    .join('\n');
}

/** The recorded entry and the new one, side by side. */
export function renderMismatch(m: Mismatch, c: Colors): string {
  const where =
    m.command_index !== undefined
      ? `command ${m.command_index}${m.journal_index !== undefined ? ` (journal entry ${m.journal_index})` : ''}`
      : 'an unknown position';
  const lines = [c.bold(c.red(`Journal mismatch (RT0016) at ${where}`))];
  const show = (s: MismatchSide) => [s.entry_type, s.label && (!s.entry_type || normaliseEntryName(s.label) !== normaliseEntryName(s.entry_type)) ? `(${s.label})` : undefined].filter(Boolean).join(' ');
  const rows: string[][] = [];
  const entryRec = show(m.recorded) || '?';
  const entryNew = show(m.new) || '?';
  const differs = (a: string, b: string) => a !== b;
  rows.push(['entry', entryRec, differs(entryRec, entryNew) ? c.yellow(entryNew) : entryNew]);
  if (m.recorded.name !== undefined || m.new.name !== undefined) {
    const a = m.recorded.name ?? '';
    const b = m.new.name ?? '';
    rows.push(['name', a, differs(a, b) ? c.yellow(b) : b]);
  }
  for (const d of m.differences) {
    if (d.field === 'name' && rows.some((r) => r[0] === 'name')) continue;
    rows.push([d.field, d.recorded, c.yellow(d.new)]);
  }
  for (const n of m.notes) rows.push(['awaiting', '', n]);
  lines.push(
    table(['', 'RECORDED (journal)', 'NEW (this attempt)'], rows, c)
      .split('\n')
      .map((l) => `  ${l}`)
      .join('\n'),
  );
  if (m.labels_swapped) {
    lines.push(c.dim(`  (the SDK's message calls '${m.new.label}' recorded and '${m.recorded.label}' new: the journal shows it the other way round)`));
  }
  return lines.join('\n');
}
