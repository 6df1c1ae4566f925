import { InvocationId } from '../../common/ids.js';
import type { TimerFired } from '../../log/commands.js';
import { SleepDone, notify, type FoldContext } from './context.js';

/** A durable sleep is over: its completion goes to the journal (once: the timer is consumed). */
export function foldTimerFired(ctx: FoldContext, cmd: TimerFired): void {
  const id = InvocationId.fromBytes(cmd.invocation_id)?.text;
  if (id === undefined) return;
  if (!ctx.state.deleteTimer({ id, completion_id: cmd.completion_id ?? 0, wake_up_ms: cmd.wake_up_ms ?? 0 })) return;
  const s = ctx.state.invocations.get(id);
  if (s === undefined || s.status === 'completed') return;
  notify(ctx, s, SleepDone(cmd.completion_id ?? 0), { completion: cmd.completion_id ?? 0 });
  ctx.state.putStatus(s);
}
