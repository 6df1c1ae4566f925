import { InvocationId } from '../../common/ids.js';
import type { RetryAttempt } from '../../log/commands.js';
import { resume, type FoldContext } from './context.js';

/** The backoff of a failed attempt is over. */
export function foldRetryAttempt(ctx: FoldContext, cmd: RetryAttempt): void {
  const id = InvocationId.fromBytes(cmd.invocation_id)?.text;
  const s = id === undefined ? undefined : ctx.state.invocations.get(id);
  if (s === undefined || s.status !== 'backing-off' || s.epoch !== (cmd.epoch ?? 0)) return;
  s.modified_at_ms = ctx.now_ms;
  resume(ctx, s);
  ctx.state.putStatus(s);
}
