import type { CallResult } from '../../log/commands.js';
import { notification, notify, protocolResult, statusOf, type FoldContext } from './context.js';

/** The result of a call, attachment or output request reaches the invocation that waits for it. */
export function foldCallResult(ctx: FoldContext, cmd: CallResult): void {
  const s = statusOf(ctx, cmd.invocation_id, 'call_result');
  if (s === undefined || s.status === 'completed') return;
  const completion_id = cmd.completion_id ?? 0;
  notify(ctx, s, notification(cmd.entry_type ?? 0, { completion_id, ...protocolResult(cmd) }), { completion: completion_id });
  ctx.state.putStatus(s);
}
