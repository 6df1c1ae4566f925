import type { Command } from '../../log/commands.js';
import { foldAttemptEnded } from './attempt-ended.js';
import { foldCallResult } from './call-result.js';
import type { FoldContext } from './context.js';
import { foldInvoke } from './invoke.js';
import { foldJournalAppend } from './journal-append.js';
import { foldManage } from './manage.js';
import { foldAttach, foldOutboxDelivered, foldPurge, foldSetObjectState } from './misc.js';
import { foldRetryAttempt } from './retry-attempt.js';
import { foldSignal } from './signal.js';
import { foldTimerFired } from './timer-fired.js';

export type { FoldContext } from './context.js';

/** Folds one log command into the partition state. Deterministic: no clock, no I/O. */
export function fold(ctx: FoldContext, cmd: Command): void {
  if (cmd.source_partition !== undefined) {
    // From another partition's outbox: apply each message once, even when redelivered.
    const seq = cmd.source_seq ?? 0;
    if (seq <= (ctx.state.dedup.get(cmd.source_partition) ?? 0)) return;
    ctx.state.setDedup(cmd.source_partition, seq);
  }
  const c = cmd as any;
  if (c.invoke) return foldInvoke(ctx, c.invoke);
  if (c.journal_append) return foldJournalAppend(ctx, c.journal_append);
  if (c.attempt_ended) return foldAttemptEnded(ctx, c.attempt_ended);
  if (c.timer_fired) return foldTimerFired(ctx, c.timer_fired);
  if (c.retry_attempt) return foldRetryAttempt(ctx, c.retry_attempt);
  if (c.call_result) return foldCallResult(ctx, c.call_result);
  if (c.signal) return foldSignal(ctx, c.signal);
  if (c.outbox_delivered) return foldOutboxDelivered(ctx, c.outbox_delivered);
  if (c.manage) return foldManage(ctx, c.manage);
  if (c.purge) return foldPurge(ctx, c.purge);
  if (c.attach) return foldAttach(ctx, c.attach);
  if (c.set_object_state) return foldSetObjectState(ctx, c.set_object_state);
}
