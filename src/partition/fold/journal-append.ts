import type { JournalAppend } from '../../log/commands.js';
import { InvocationId } from '../../common/ids.js';
import { MessageType, decode, encode, pb } from '../../invoker/messages.js';
import type { InvocationResult } from '../state.js';
import type { FoldContext } from './context.js';

/** An entry from the live attempt: a command it issued, or the completion of its `ctx.run`. */
export function foldJournalAppend(ctx: FoldContext, cmd: JournalAppend): void {
  const id = InvocationId.fromBytes(cmd.invocation_id)?.text;
  const s = id === undefined ? undefined : ctx.state.invocations.get(id);
  if (s === undefined || s.status !== 'running' || s.epoch !== cmd.epoch) return;
  if (s.deployment_id === undefined && cmd.deployment_id) {
    s.deployment_id = cmd.deployment_id;
    s.protocol_version = cmd.protocol_version;
  }
  const entry = { type: cmd.entry_type, payload: cmd.entry };
  ctx.state.appendEntry(s, entry);
  s.modified_at_ms = ctx.now_ms;
  switch (cmd.entry_type) {
    case MessageType.SleepCommand: {
      const sleep = decode(pb.Sleep, cmd.entry);
      const timer = { id: s.id, completion_id: sleep.result_completion_id ?? 0, wake_up_ms: Number(sleep.wake_up_time ?? 0) };
      ctx.state.putTimer(timer);
      ctx.actions.push({ kind: 'timer', timer });
      break;
    }
    case MessageType.OutputCommand:
      s.output = outputResult(cmd.entry);
      break;
    case MessageType.RunCompletion: {
      const n = decode(pb.Notification, cmd.entry);
      const reply = cmd.requested_ack
        ? { type: MessageType.ProposeRunCompletionAck, payload: encode(pb.ProposeRunCompletionAck, { completion_id: n.completion_id }) }
        : entry;
      ctx.actions.push({ kind: 'forward', id: s.id, epoch: s.epoch, type: reply.type, payload: reply.payload });
      break;
    }
  }
  ctx.state.putStatus(s);
}

function outputResult(payload: Buffer): InvocationResult {
  const out = decode(pb.Output, payload);
  if (out.failure) {
    const failure: NonNullable<InvocationResult['failure']> = { code: out.failure.code ?? 500, message: out.failure.message ?? '' };
    if (out.failure.metadata?.length) failure.metadata = out.failure.metadata;
    return { failure };
  }
  return { value: (out.value?.content ?? Buffer.alloc(0)).toString('base64') };
}


