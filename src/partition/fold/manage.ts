import { assertNever } from '../../common/assert.js';
import { InvocationId } from '../../common/ids.js';
import { ManageAction, TimerKind, type Manage } from '../../log/commands.js';
import { MessageType } from '../../protocol/messages.js';
import { objectKeyOf, type InvocationStatus } from '../state.js';
import { complete, dropWait, leaveQueue, notification, notify, resume, sendTo, statusOf, type FoldContext } from './context.js';

export const CANCEL_SIGNAL = 1;
/** The result of a killed invocation (metrics tell it from other failures by it). */
export const KILLED_FAILURE = { code: 409, message: 'killed' } as const;

/** Operator actions: cancel (a signal the handler sees), kill, pause, resume. */
export function foldManage(ctx: FoldContext, cmd: Manage): void {
  const s = statusOf(ctx, cmd.invocation_id, 'manage');
  if (s === undefined || s.status === 'completed') return;
  s.modified_at_ms = ctx.now_ms;
  const action = (cmd.action ?? ManageAction.CANCEL) as (typeof ManageAction)[keyof typeof ManageAction];
  switch (action) {
    case ManageAction.CANCEL:
      if (cancelNotStarted(ctx, s)) return;
      notify(ctx, s, notification(MessageType.SignalNotification, { signal_id: CANCEL_SIGNAL, void: {} }), { signal: CANCEL_SIGNAL });
      if (s.status === 'suspended') resume(ctx, s);
      break;
    case ManageAction.KILL:
      kill(ctx, s);
      break;
    case ManageAction.PAUSE:
      if (s.status === 'running' || s.status === 'backing-off' || s.status === 'suspended') {
        if (s.status === 'running') ctx.actions.push({ kind: 'abort', id: s.id });
        // Entries still in flight from the stopped attempt are dropped.
        s.epoch += 1;
        s.status = 'paused';
        delete s.next_retry_at_ms;
      }
      break;
    case ManageAction.RESUME:
      if (s.status === 'paused' || s.status === 'backing-off' || s.status === 'suspended') resume(ctx, s);
      break;
    default:
      assertNever(action, 'Manage.action');
  }
  ctx.state.putStatus(s);
}

/** Cancelling an invocation that has not started completes it right away with "canceled". */
export function cancelNotStarted(ctx: FoldContext, s: InvocationStatus): boolean {
  if (s.status !== 'inboxed' && s.status !== 'scheduled') return false;
  // One that ran before and waits for a flow-control slot again sees the cancel when it runs.
  if (s.last_start_at_ms !== undefined) return false;
  unqueue(ctx, s);
  complete(ctx, s, { failure: { code: 409, message: 'canceled' } });
  ctx.state.putStatus(s);
  return true;
}

function unqueue(ctx: FoldContext, s: InvocationStatus): void {
  if (s.status === 'inboxed' && s.flow_seq !== undefined) leaveQueue(ctx, s);
  else if (s.status === 'inboxed') ctx.state.removeFromInbox(objectKeyOf(s.service, s.key, s.scope), s.id);
  dropWait(s); // a wait ended without a start is not counted
  if (s.status === 'scheduled' && s.execute_at_ms !== undefined) {
    ctx.state.deleteTimer({ id: s.id, completion_id: 0, wake_up_ms: s.execute_at_ms, kind: TimerKind.INVOKE });
  }
}

/** Ends the invocation now with "killed", its partial progress lost; its callees die with it. */
function kill(ctx: FoldContext, s: InvocationStatus): void {
  unqueue(ctx, s);
  if (s.status === 'running') ctx.actions.push({ kind: 'abort', id: s.id });
  s.epoch += 1;
  for (const child of s.children ?? []) {
    sendTo(ctx, child, { kind: 'manage', manage: { invocation_id: InvocationId.parse(child)!.bytes, action: ManageAction.KILL } });
  }
  complete(ctx, s, { failure: { ...KILLED_FAILURE } });
}
