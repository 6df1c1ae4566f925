import type { Command } from '../../log/commands.js';
import { foldAttemptEnded } from './attempt-ended.js';
import type { FoldContext } from './context.js';
import { foldInvoke } from './invoke.js';
import { foldJournalAppend } from './journal-append.js';
import { foldRetryAttempt } from './retry-attempt.js';
import { foldTimerFired } from './timer-fired.js';

export type { FoldContext } from './context.js';

/** Folds one log command into the partition state. Deterministic: no clock, no I/O. */
export function fold(ctx: FoldContext, cmd: Command): void {
  if ('invoke' in cmd && cmd.invoke) return foldInvoke(ctx, cmd.invoke);
  if ('journal_append' in cmd && cmd.journal_append) return foldJournalAppend(ctx, cmd.journal_append);
  if ('attempt_ended' in cmd && cmd.attempt_ended) return foldAttemptEnded(ctx, cmd.attempt_ended);
  if ('timer_fired' in cmd && cmd.timer_fired) return foldTimerFired(ctx, cmd.timer_fired);
  if ('retry_attempt' in cmd && cmd.retry_attempt) return foldRetryAttempt(ctx, cmd.retry_attempt);
}
