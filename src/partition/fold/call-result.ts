import type { CallResult, ResultMsg } from '../../log/commands.js';
import { notification, notify, statusOf, type FoldContext } from './context.js';

/** The result of a call, attachment or output request reaches the invocation that waits for it. */
export function foldCallResult(ctx: FoldContext, cmd: CallResult): void {
  const s = statusOf(ctx, cmd.invocation_id);
  if (s === undefined || s.status === 'completed') return;
  const completion_id = cmd.completion_id ?? 0;
  notify(ctx, s, notification(cmd.entry_type, { completion_id }, protocolResult(cmd)), { completion: completion_id });
  ctx.state.putStatus(s);
}

export function protocolResult(r: ResultMsg): Record<string, unknown> {
  if (r.failure) return { failure: { code: r.failure.code ?? 500, message: r.failure.message ?? '', metadata: r.failure.metadata ?? [] } };
  if (r.value !== undefined) return { value: { content: r.value } };
  return { void: {} };
}
