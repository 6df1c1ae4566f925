import type { Action, InvocationStatus, JournalEntry, PartitionState } from '../state.js';
import { MessageType, decode, encode, isNotification, pb } from '../../invoker/messages.js';

/** What every fold gets: the state to change, the actions to ask for, and the command's time. */
export interface FoldContext {
  state: PartitionState;
  actions: Action[];
  now_ms: number;
}

/** Starts the next attempt of an invocation that is not running. */
export function resume(ctx: FoldContext, s: InvocationStatus): void {
  s.epoch += 1;
  s.status = 'running';
  s.last_start_at_ms = ctx.now_ms;
  delete s.waiting;
  delete s.next_retry_at_ms;
  ctx.actions.push({ kind: 'start', id: s.id, epoch: s.epoch });
}

export interface NotificationId {
  completion?: number;
  signal?: number;
  named_signal?: string;
}

/**
 * Records a notification in the journal and delivers it: forwarded to the live attempt, or
 * resuming a suspended invocation that waits for it. Other states replay it on their next attempt.
 */
export function notify(ctx: FoldContext, s: InvocationStatus, entry: JournalEntry, id: NotificationId): void {
  ctx.state.appendEntry(s, entry);
  s.modified_at_ms = ctx.now_ms;
  if (s.status === 'running') {
    ctx.actions.push({ kind: 'forward', id: s.id, epoch: s.epoch, type: entry.type, payload: entry.payload });
  } else if (s.status === 'suspended' && s.waiting !== undefined && awaits(s.waiting, id)) {
    resume(ctx, s);
  }
}

function awaits(w: NonNullable<InvocationStatus['waiting']>, id: NotificationId): boolean {
  return (
    (id.completion !== undefined && w.completions.includes(id.completion)) ||
    (id.signal !== undefined && w.signals.includes(id.signal)) ||
    (id.named_signal !== undefined && w.named_signals.includes(id.named_signal))
  );
}

/** True when the journal already holds a notification the suspension waits for. */
export function anyArrived(journal: JournalEntry[], w: NonNullable<InvocationStatus['waiting']>): boolean {
  for (const e of journal) {
    if (!isNotification(e.type)) continue;
    const n = decode(pb.Notification, e.payload);
    if (awaits(w, { completion: n.completion_id, signal: n.signal_id, named_signal: n.signal_name })) return true;
  }
  return false;
}

export function completionNotification(type: number, completion_id: number, result: Record<string, unknown>): JournalEntry {
  return { type, payload: Buffer.from(encode(pb.Notification, { completion_id, ...result })) };
}

export const SleepDone = (completion_id: number): JournalEntry =>
  completionNotification(MessageType.SleepCompletion, completion_id, { void: {} });
