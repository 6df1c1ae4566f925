import type { RetryAttempt } from '../../log/commands.js';
import { resume, statusOf, type FoldContext } from './context.js';

/** The backoff of a failed attempt is over. */
export function foldRetryAttempt(ctx: FoldContext, cmd: RetryAttempt): void {
  const s = statusOf(ctx, cmd.invocation_id, 'retry_attempt');
  if (s === undefined || s.status !== 'backing-off' || s.epoch !== (cmd.epoch ?? 0)) return;
  resume(ctx, s);
  ctx.state.putStatus(s);
}
