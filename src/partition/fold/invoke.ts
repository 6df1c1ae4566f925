import type { Invoke } from '../../log/commands.js';
import { InvocationId } from '../../common/ids.js';
import { MessageType, encode, pb } from '../../invoker/messages.js';
import type { InvocationStatus } from '../state.js';
import type { FoldContext } from './context.js';

/** A new invocation: its journal starts with the Input command, and its first attempt starts. */
export function foldInvoke(ctx: FoldContext, cmd: Invoke): void {
  const id = InvocationId.fromBytes(cmd.invocation_id);
  if (id === undefined) return;
  if (ctx.state.invocations.has(id.text)) return;
  const s: InvocationStatus = {
    id: id.text,
    service: cmd.service,
    handler: cmd.handler,
    key: cmd.key ?? '',
    service_type: cmd.service_type ?? 'Service',
    status: 'running',
    epoch: 0,
    journal_length: 0,
    created_at_ms: ctx.now_ms,
    modified_at_ms: ctx.now_ms,
    retry_count: 0,
    last_start_at_ms: ctx.now_ms,
  };
  if (cmd.idempotency_key) s.idempotency_key = cmd.idempotency_key;
  const input = encode(pb.Input, { headers: cmd.headers ?? [], value: { content: cmd.input ?? Buffer.alloc(0) } });
  ctx.state.appendEntry(s, { type: MessageType.InputCommand, payload: Buffer.from(input) });
  ctx.state.putStatus(s);
  ctx.actions.push({ kind: 'start', id: s.id, epoch: s.epoch });
}
