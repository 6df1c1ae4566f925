import { InvocationId } from '../../common/ids.js';
import { TimerKind, type Invoke } from '../../log/commands.js';
import { MessageType, encode, pb } from '../../protocol/messages.js';
import { MAX_PRIORITY } from '../../storage/tables/vqueues.js';
import type { InvocationStatus } from '../state.js';
import { idOf, resultMsg, sendResult, startOrEnqueue, type FoldContext } from './context.js';

/**
 * A new invocation: its journal starts with the Input command; it starts now, waits for its
 * key, or waits for its scheduled time. Invocation ids of idempotent calls and workflow runs
 * are deterministic, so a repeat lands on the existing invocation.
 */
export function foldInvoke(ctx: FoldContext, cmd: Invoke): void {
  const id = idOf(cmd.invocation_id, 'invoke');
  const caller = cmd.caller_invocation_id?.length ? InvocationId.fromBytes(cmd.caller_invocation_id)?.text : undefined;
  // Random ids are new by construction; only derived ones (idempotent requests, workflow runs)
  // may name an invocation that completed and left memory, which the store lookup finds.
  const derived = Boolean(cmd.idempotency_key) || (cmd.service_type === 'Workflow' && cmd.handler_type === 'Workflow');
  const existing = derived ? ctx.state.status(id.text) : ctx.state.invocations.get(id.text);
  if (existing !== undefined) {
    if (caller !== undefined) attachCaller(ctx, existing, caller, cmd.caller_completion_id ?? 0);
    return;
  }
  const s: InvocationStatus = {
    id: id.text,
    service: cmd.service ?? '',
    handler: cmd.handler ?? '',
    key: cmd.key ?? '',
    service_type: cmd.service_type || 'Service',
    handler_type: cmd.handler_type ?? '',
    status: 'running',
    epoch: 0,
    journal_length: 0,
    created_at_ms: ctx.now_ms,
    modified_at_ms: ctx.now_ms,
    retry_count: 0,
    completion_retention_ms: cmd.completion_retention_ms ?? 0,
    journal_retention_ms: cmd.journal_retention_ms ?? 0,
  };
  if (cmd.idempotency_key) s.idempotency_key = cmd.idempotency_key;
  if (caller !== undefined) {
    s.caller_id = caller;
    s.caller_completion_id = cmd.caller_completion_id ?? 0;
  }
  if (cmd.caller_target) s.caller_target = cmd.caller_target;
  if (cmd.invoked_by_id) s.invoked_by_id = cmd.invoked_by_id;
  if (cmd.restarted_from) s.restarted_from = cmd.restarted_from;
  if (cmd.traceparent) s.traceparent = cmd.traceparent;
  if (cmd.invoked_by_subscription_id) s.invoked_by_subscription_id = cmd.invoked_by_subscription_id;
  if (cmd.scope) s.scope = cmd.scope;
  if (cmd.scope && cmd.limit_key) s.limit_key = cmd.limit_key;
  if (cmd.scope && cmd.priority) s.priority = Math.min(cmd.priority, MAX_PRIORITY); // the ingress checked it; a log record never stops the partition
  const input = encode(pb.Input, { headers: cmd.headers ?? [], value: { content: cmd.input ?? Buffer.alloc(0) } });
  ctx.state.appendEntry(s, { type: MessageType.InputCommand, payload: Buffer.from(input) });
  if (cmd.execute_at_ms && cmd.execute_at_ms > ctx.now_ms) {
    s.status = 'scheduled';
    s.scheduled_at_ms = ctx.now_ms;
    s.execute_at_ms = cmd.execute_at_ms;
    const timer = { id: s.id, completion_id: 0, wake_up_ms: cmd.execute_at_ms, kind: TimerKind.INVOKE };
    ctx.state.putTimer(timer);
    ctx.actions.push({ kind: 'timer', timer });
  } else {
    startOrEnqueue(ctx, s);
  }
  ctx.state.createStatus(s);
}

/** A caller reached an invocation that already exists: it gets the result when there is one. */
function attachCaller(ctx: FoldContext, s: InvocationStatus, caller: string, completion_id: number): void {
  if (s.service_type === 'Workflow' && s.handler_type === 'Workflow') {
    sendResult(ctx, caller, completion_id, MessageType.CallCompletion, { failure: { code: 409, message: 'the workflow method was already invoked' } });
    return;
  }
  if (s.status === 'completed') {
    sendResult(ctx, caller, completion_id, MessageType.CallCompletion, resultMsg(s.result));
    return;
  }
  s.attachers = [...(s.attachers ?? []), { id: caller, completion_id, entry_type: MessageType.CallCompletion }];
  ctx.state.putStatus(s);
}
