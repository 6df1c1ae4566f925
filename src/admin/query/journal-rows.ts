// `sys_journal` rows from stored journal entries. Runs in the query engine's process, so that
// decoding many journals never costs the event loop that serves ingress and admin.

import { MessageType, commandTypes, decode, entryTypeName, isNotification, pb, type Codec } from '../../protocol/messages.js';
import { ts, type RawJournalEntry, type Row, type StepAttempts } from '../introspection.js';

/** The fields of journal entries that `sys_journal` shows, whichever command or notification they are. */
interface EntryView {
  name?: string;
  entry_name?: string;
  result_completion_id?: number;
  invocation_id_notification_idx?: number;
  service_name?: string;
  handler_name?: string;
  key?: string;
  wake_up_time?: number;
}

/** Completion ids that have their notification, and the child invocation id a call's notification names. */
function notifications(entries: readonly RawJournalEntry[]): { completed: Set<number>; invoked: Map<number, string> } {
  const completed = new Set<number>();
  const invoked = new Map<number, string>();
  for (const e of entries) {
    if (!isNotification(e.type)) continue;
    const n = decode(pb.Notification, e.payload);
    if (n.completion_id === undefined) continue;
    completed.add(n.completion_id);
    if (n.invocation_id) invoked.set(n.completion_id, n.invocation_id);
  }
  return { completed, invoked };
}

const bytesAsBase64 = (_k: string, v: unknown): unknown => {
  const b = v as { type?: string; data?: unknown } | null;
  return b?.type === 'Buffer' && Array.isArray(b.data) ? Buffer.from(b.data as number[]).toString('base64') : v;
};

/** The rows of one invocation's journal, in index order (commands and notifications). */
export function journalRows(id: string, entries: readonly RawJournalEntry[], steps?: StepAttempts): Row[] {
  const { completed, invoked } = notifications(entries);
  return entries.map((e, index) => {
    const row: Row = { id, index, entry_type: entryTypeName(e.type), version: 2 };
    const type = (commandTypes.get(e.type) ?? (isNotification(e.type) ? pb.Notification : undefined)) as Codec<EntryView> | undefined;
    if (type === undefined) return row;
    const m = decode(type, e.payload);
    if (m.name) row.name = m.name;
    if (m.entry_name) row.name = m.entry_name;
    const cid = m.result_completion_id;
    if (cid !== undefined) row.completed = completed.has(cid) ? 1 : 0;
    if (e.type === MessageType.RunCommand && steps !== undefined) {
      // A finished step took the attempts recorded (1 when none were); the one under way, those so far.
      const attempts = completed.has(cid ?? 0) ? (steps.done?.[String(cid ?? 0)] ?? 1) : steps.current ?? 0;
      if (attempts > 0) row.attempts = attempts;
    }
    if (e.type === MessageType.CallCommand || e.type === MessageType.OneWayCallCommand) {
      const child = invoked.get(m.invocation_id_notification_idx ?? 0);
      if (child) row.invoked_id = child;
      row.invoked_target = [m.service_name, m.key, m.handler_name].filter((x) => x).join('/');
      if (e.type === MessageType.OneWayCallCommand) row.completed = child !== undefined ? 1 : 0;
    }
    if (e.type === MessageType.SleepCommand) row.sleep_wakeup_at = ts(Number(m.wake_up_time ?? 0));
    if (e.type === MessageType.GetPromiseCommand || e.type === MessageType.PeekPromiseCommand || e.type === MessageType.CompletePromiseCommand) {
      row.promise_name = m.key ?? null;
    }
    row.entry_json = JSON.stringify(m, bytesAsBase64);
    return row;
  });
}
