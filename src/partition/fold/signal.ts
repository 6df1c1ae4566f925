import type { Signal } from '../../log/commands.js';
import { MessageType } from '../../protocol/messages.js';
import { cancelNotStarted, CANCEL_SIGNAL } from './manage.js';
import { notification, notify, protocolResult, resume, statusOf, type FoldContext } from './context.js';

/** A signal for an invocation: an awakeable completion, a named signal, or CANCEL. */
export function foldSignal(ctx: FoldContext, cmd: Signal): void {
  const s = statusOf(ctx, cmd.invocation_id, 'signal');
  if (s === undefined || s.status === 'completed') return;
  if (cmd.idx === CANCEL_SIGNAL && cancelNotStarted(ctx, s)) return;
  const id = cmd.name !== undefined ? { signal_name: cmd.name } : { signal_id: cmd.idx ?? 0 };
  notify(ctx, s, notification(MessageType.SignalNotification, { ...id, ...protocolResult(cmd) }), cmd.name !== undefined ? { named_signal: cmd.name } : { signal: cmd.idx ?? 0 });
  // The SDK always listens for CANCEL, even when its suspension did not name it.
  if (cmd.idx === CANCEL_SIGNAL && s.status === 'suspended') resume(ctx, s);
  ctx.state.putStatus(s);
}
