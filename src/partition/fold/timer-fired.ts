import { TimerKind, type TimerFired } from '../../log/commands.js';
import { MessageType } from '../../protocol/messages.js';
import { idOf, notification, notify, startOrEnqueue, type FoldContext } from './context.js';
import { foldScheduleDue } from './schedule.js';

/**
 * A timer is due: a durable sleep completes, a scheduled invocation starts, or a schedule fires.
 * Each fires once.
 * A FLOW timer only has to be folded: the waiters whose rate time has come were admitted before
 * any command of that time (admitDue, in `fold`).
 */
export function foldTimerFired(ctx: FoldContext, cmd: TimerFired): void {
  const id = idOf(cmd.invocation_id, 'timer_fired').text;
  const kind = cmd.kind ?? TimerKind.SLEEP;
  const completion_id = cmd.completion_id ?? 0;
  if (!ctx.state.deleteTimer({ id, completion_id, wake_up_ms: cmd.wake_up_ms ?? 0, kind })) return;
  if (kind === TimerKind.FLOW) return;
  if (kind === TimerKind.SCHEDULE) return foldScheduleDue(ctx, id, cmd.wake_up_ms ?? 0);
  const s = ctx.state.status(id);
  if (s === undefined) return;
  if (kind === TimerKind.INVOKE) {
    if (s.status !== 'scheduled') return;
    if (s.scope !== undefined) s.runnable_at_ms = s.execute_at_ms;
    delete s.execute_at_ms;
    startOrEnqueue(ctx, s);
  } else {
    if (s.status === 'completed') return;
    notify(ctx, s, notification(MessageType.SleepCompletion, { completion_id, void: {} }), { completion: completion_id });
  }
  ctx.state.putStatus(s);
}

