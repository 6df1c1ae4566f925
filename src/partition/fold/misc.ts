import { InvocationId } from '../../common/ids.js';
import type { Attach, OutboxDelivered, Purge, SetObjectState } from '../../log/commands.js';
import { objectKeyOf } from '../state.js';
import { resultMsg, sendTo, statusOf, type FoldContext } from './context.js';
import { MessageType } from '../../invoker/messages.js';

/** An outbox entry reached its partition's log; it is no longer needed here. */
export function foldOutboxDelivered(ctx: FoldContext, cmd: OutboxDelivered): void {
  ctx.state.deleteOutbox(cmd.seq ?? 0);
}

/** Removes a completed invocation, or only its journal. */
export function foldPurge(ctx: FoldContext, cmd: Purge): void {
  const s = statusOf(ctx, cmd.invocation_id);
  if (s === undefined || s.status !== 'completed') return;
  ctx.state.deleteJournal(s);
  if (cmd.journal_only) {
    s.journal_length = 0;
    s.modified_at_ms = ctx.now_ms;
    ctx.state.putStatus(s);
  } else {
    ctx.state.deleteStatus(s);
  }
}

/** Another invocation asks for this one's result: now (output) or when it completes (attach). */
export function foldAttach(ctx: FoldContext, cmd: Attach): void {
  const waiter = InvocationId.fromBytes(cmd.waiter_invocation_id)!;
  const answer = (r: Parameters<typeof resultMsg>[0] | { failure: { code: number; message: string } }) =>
    sendTo(ctx, waiter.text, {
      call_result: { invocation_id: waiter.bytes, completion_id: cmd.waiter_completion_id ?? 0, entry_type: cmd.entry_type, ...resultMsg(r as any) },
    });
  const s = statusOf(ctx, cmd.invocation_id);
  if (s === undefined) return answer({ failure: { code: 404, message: 'invocation not found' } });
  if (s.status === 'completed') return answer(s.result);
  if (cmd.entry_type === MessageType.GetInvocationOutputCompletion) return answer(undefined);
  s.attachers = [...(s.attachers ?? []), { id: waiter.text, completion_id: cmd.waiter_completion_id ?? 0, entry_type: cmd.entry_type }];
  ctx.state.putStatus(s);
}

/** The operator's new state of one object/workflow key replaces the old one entirely. */
export function foldSetObjectState(ctx: FoldContext, cmd: SetObjectState): void {
  const objectKey = objectKeyOf(cmd.service, cmd.key);
  ctx.state.clearState(objectKey);
  for (const e of cmd.entries ?? []) ctx.state.setState(objectKey, Buffer.from(e.key, 'utf8').toString('base64url'), e.value ?? Buffer.alloc(0));
}
