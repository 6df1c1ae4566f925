import { assertNever } from '../../common/assert.js';
import type { Command } from '../../log/commands.js';
import { foldAttemptEnded } from './attempt-ended.js';
import { foldCallResult } from './call-result.js';
import { admitDue, admitWaiting, type FoldContext } from './context.js';
import { foldFlowQueue, foldLimitRules } from './limit-rules.js';
import { foldInvoke } from './invoke.js';
import { foldJournalAppend } from './journal-append.js';
import { foldManage } from './manage.js';
import { foldModifyState } from './modify-state.js';
import { foldAttach, foldOutboxDelivered, foldPurge } from './misc.js';
import { foldRetryAttempt } from './retry-attempt.js';
import { foldSchedule } from './schedule.js';
import { foldSignal } from './signal.js';
import { foldExpireState, foldStateTtls } from './state-ttl.js';
import { foldSubscriptionRecords } from './subscription-records.js';
import { foldTimerFired } from './timer-fired.js';

export type { FoldContext } from './context.js';

/**
 * Folds one log command into the partition state. Deterministic: no clock, no I/O. Invocations
 * waiting for a flow-control slot the command freed start in the same fold.
 */
export function fold(ctx: FoldContext, cmd: Command): void {
  ctx.state.flow.now_ms = ctx.now_ms;
  if (cmd.source_partition !== undefined) {
    // From another partition's outbox: apply each message once, even when redelivered.
    const seq = cmd.source_seq ?? 0;
    if (seq <= (ctx.state.dedup.get(cmd.source_partition) ?? 0)) return;
    ctx.state.setDedup(cmd.source_partition, seq);
  }
  admitDue(ctx);
  foldKind(ctx, cmd);
  if (ctx.state.flow.released.size > 0) admitWaiting(ctx);
}

function foldKind(ctx: FoldContext, cmd: Command): void {
  switch (cmd.kind) {
    case 'invoke':
      return foldInvoke(ctx, cmd.invoke);
    case 'journal_append':
      return foldJournalAppend(ctx, cmd.journal_append);
    case 'attempt_ended':
      return foldAttemptEnded(ctx, cmd.attempt_ended);
    case 'timer_fired':
      return foldTimerFired(ctx, cmd.timer_fired);
    case 'retry_attempt':
      return foldRetryAttempt(ctx, cmd.retry_attempt);
    case 'call_result':
      return foldCallResult(ctx, cmd.call_result);
    case 'signal':
      return foldSignal(ctx, cmd.signal);
    case 'outbox_delivered':
      return foldOutboxDelivered(ctx, cmd.outbox_delivered);
    case 'manage':
      return foldManage(ctx, cmd.manage);
    case 'purge':
      return foldPurge(ctx, cmd.purge);
    case 'attach':
      return foldAttach(ctx, cmd.attach);
    case 'modify_state':
      return foldModifyState(ctx, cmd.modify_state);
    case 'subscription_records':
      return foldSubscriptionRecords(ctx, cmd.subscription_records);
    case 'limit_rules':
      return foldLimitRules(ctx, cmd.limit_rules);
    case 'flow_queue':
      return foldFlowQueue(ctx, cmd.flow_queue);
    case 'state_ttls':
      return foldStateTtls(ctx, cmd.state_ttls);
    case 'expire_state':
      return foldExpireState(ctx, cmd.expire_state);
    case 'schedule':
      return foldSchedule(ctx, cmd.schedule);
    default:
      return assertNever(cmd, 'log command kind');
  }
}
