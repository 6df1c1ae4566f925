import type { Attach, OutboxDelivered, Purge } from '../../log/commands.js';
import { MessageType } from '../../protocol/messages.js';
import { idOf, resultMsg, sendResult, statusOf, type FoldContext } from './context.js';

/** An outbox entry reached its partition's log; it is no longer needed here. */
export function foldOutboxDelivered(ctx: FoldContext, cmd: OutboxDelivered): void {
  ctx.state.deleteOutbox(cmd.seq ?? 0);
}

/** Removes a completed invocation, or only its journal. */
export function foldPurge(ctx: FoldContext, cmd: Purge): void {
  const s = statusOf(ctx, cmd.invocation_id, 'purge');
  if (s === undefined || s.status !== 'completed') return;
  ctx.state.deleteJournal(s);
  ctx.state.unindexExpiry(s, cmd.journal_only ? 'journal' : 'all');
  if (cmd.journal_only) {
    s.journal_length = 0;
    s.modified_at_ms = ctx.now_ms;
    ctx.state.putStatus(s);
  } else {
    ctx.state.deleteStatus(s);
  }
}

/** Another invocation asks for this one's result: now (output) or when it completes (attach). */
export function foldAttach(ctx: FoldContext, cmd: Attach): void {
  const waiter = idOf(cmd.waiter_invocation_id, 'attach waiter');
  const completion_id = cmd.waiter_completion_id ?? 0;
  const entry_type = cmd.entry_type ?? MessageType.AttachInvocationCompletion;
  const s = statusOf(ctx, cmd.invocation_id, 'attach');
  if (s === undefined) return sendResult(ctx, waiter.text, completion_id, entry_type, { failure: { code: 404, message: 'invocation not found' } });
  if (s.status === 'completed') return sendResult(ctx, waiter.text, completion_id, entry_type, resultMsg(s.result));
  if (entry_type === MessageType.GetInvocationOutputCompletion) return sendResult(ctx, waiter.text, completion_id, entry_type, resultMsg(undefined));
  s.attachers = [...(s.attachers ?? []), { id: waiter.text, completion_id, entry_type }];
  ctx.state.putStatus(s);
}
