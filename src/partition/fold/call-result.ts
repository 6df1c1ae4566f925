import type { CallResult } from '../../log/commands.js';
import { idOf, notification, notify, protocolResult, type FoldContext } from './context.js';
import { foldScheduleResult } from './schedule.js';

/**
 * The result of a call, attachment or output request reaches the invocation that waits for it,
 * or the result of a schedule's firing reaches the schedule.
 */
export function foldCallResult(ctx: FoldContext, cmd: CallResult): void {
  const id = idOf(cmd.invocation_id, 'call_result').text;
  const s = ctx.state.status(id);
  if (s === undefined) {
    foldScheduleResult(ctx, id, cmd);
    return;
  }
  if (s.status === 'completed') return;
  const completion_id = cmd.completion_id ?? 0;
  notify(ctx, s, notification(cmd.entry_type ?? 0, { completion_id, ...protocolResult(cmd) }), { completion: completion_id });
  ctx.state.putStatus(s);
}
