import { parseLimitKey } from '../../common/limit-rules.js';
import { assert } from '../../common/assert.js';
import { InvocationId, decodeAwakeableId, idempotentInvocationId, workflowInvocationId } from '../../common/ids.js';
import type { JournalAppend, ResultMsg } from '../../log/commands.js';
import {
  MessageType,
  decode,
  pb,
  type AttachInvocationCommandMessage,
  type CallCommandMessage,
  type Codec,
  type Failure,
  type GetInvocationOutputCommandMessage,
  type OneWayCallCommandMessage,
  type Value,
} from '../../protocol/messages.js';
import type { InvocationStatus } from '../state.js';
import { notification, notify, sendTo, type FoldContext } from './context.js';
import type { EntryRule } from './entry-rule.js';

// Calls, sends, signals and attachments: each reaches another invocation through the outbox.

const target = (s: InvocationStatus) => (s.key ? `${s.service}/${s.key}/${s.handler}` : `${s.service}/${s.handler}`);

function childOf(cmd: JournalAppend): InvocationId | undefined {
  return cmd.child_invocation_id ? InvocationId.fromBytes(cmd.child_invocation_id) : undefined;
}

function startChild(ctx: FoldContext, s: InvocationStatus, cmd: JournalAppend, m: CallCommandMessage | OneWayCallCommandMessage, call: boolean): void {
  const child = childOf(cmd);
  assert(child !== undefined, () => `call of ${s.id} journalled without its target id`);
  const idIdx = m.invocation_id_notification_idx ?? 0;
  notify(ctx, s, notification(MessageType.CallInvocationIdCompletion, { completion_id: idIdx, invocation_id: child.text }), { completion: idIdx });
  if (call) s.children = [...(s.children ?? []), child.text];
  const delayed = !call ? Number((m as OneWayCallCommandMessage).invoke_time ?? 0) : 0;
  sendTo(ctx, child.text, {
    kind: 'invoke',
    invoke: {
      invocation_id: child.bytes,
      service: m.service_name ?? '',
      handler: m.handler_name ?? '',
      key: m.key ?? '',
      input: m.parameter ?? Buffer.alloc(0),
      headers: (m.headers ?? []).map((h) => ({ key: h.key ?? '', value: h.value ?? '' })),
      ...(m.idempotency_key ? { idempotency_key: m.idempotency_key } : {}),
      // Protocol v7 (checked by the attempt before the append, RT0024): a child does not inherit its caller's scope.
      ...(m.scope ? { scope: m.scope, ...limitKeyOf(m.limit_key) } : {}),
      service_type: cmd.child_service_type ?? 'Service',
      handler_type: cmd.child_handler_type ?? '',
      completion_retention_ms: cmd.child_completion_retention_ms ?? 0,
      journal_retention_ms: cmd.child_journal_retention_ms ?? 0,
      caller_target: target(s),
      invoked_by_id: s.id,
      ...(call ? { caller_invocation_id: InvocationId.parse(s.id)!.bytes, caller_completion_id: (m as CallCommandMessage).result_completion_id ?? 0 } : {}),
      ...(delayed ? { execute_at_ms: delayed } : {}),
      ...(cmd.traceparent ? { traceparent: cmd.traceparent } : {}),
    },
  });
}

/** A call's limit key as the ingress keeps it (`a/` is `a`, empty is none). */
function limitKeyOf(text: string | undefined): { limit_key?: string } {
  const levels = text ? parseLimitKey(text) : [];
  return Array.isArray(levels) && levels.length > 0 ? { limit_key: levels.join('/') } : {};
}

const needsChild: EntryRule['check'] = (_s, _e, cmd) => (childOf(cmd) ? undefined : 'call without a target invocation id');

function result(m: { value?: Value; failure?: Failure }): ResultMsg {
  if (m.failure) return { failure: { code: m.failure.code ?? 500, message: m.failure.message ?? '', metadata: (m.failure.metadata ?? []).map((x) => ({ key: x.key ?? '', value: x.value ?? '' })) } };
  if (m.value) return { value: m.value.content ?? Buffer.alloc(0) };
  return { void: true };
}

/** Resolves the target of Attach/GetInvocationOutput commands. */
function attachTarget(m: AttachInvocationCommandMessage | GetInvocationOutputCommandMessage): InvocationId | undefined {
  if (m.invocation_id) return InvocationId.parse(m.invocation_id);
  if (m.workflow_target) return workflowInvocationId(m.workflow_target.workflow_name ?? '', m.workflow_target.workflow_key ?? '', m.workflow_target.scope || undefined);
  const t = m.idempotent_request_target;
  if (t && t.idempotency_key) return idempotentInvocationId(t.service_name ?? '', t.service_key ?? '', t.handler_name ?? '', t.idempotency_key, t.scope || undefined);
  return undefined;
}

function attachRule(notificationType: number, codec: Codec<AttachInvocationCommandMessage | GetInvocationOutputCommandMessage>): EntryRule {
  return {
    check: (_s, e) => (attachTarget(decode(codec, e.payload)) ? undefined : 'the target invocation id is not valid'),
    apply(ctx, s, e) {
      const m = decode(codec, e.payload);
      const t = attachTarget(m)!;
      sendTo(ctx, t.text, {
        kind: 'attach',
        attach: { invocation_id: t.bytes, waiter_invocation_id: InvocationId.parse(s.id)!.bytes, waiter_completion_id: m.result_completion_id ?? 0, entry_type: notificationType },
      });
    },
  };
}

export const callEntries: Array<[number, EntryRule]> = [
  [MessageType.CallCommand, { check: needsChild, apply: (ctx, s, e, cmd) => startChild(ctx, s, cmd, decode(pb.Call, e.payload), true) }],
  [MessageType.OneWayCallCommand, { check: needsChild, apply: (ctx, s, e, cmd) => startChild(ctx, s, cmd, decode(pb.OneWayCall, e.payload), false) }],
  [
    MessageType.SendSignalCommand,
    {
      check: (_s, e) => (InvocationId.parse(decode(pb.SendSignal, e.payload).target_invocation_id ?? '') ? undefined : 'the target invocation id is not valid'),
      apply(ctx, _s, e) {
        const m = decode(pb.SendSignal, e.payload);
        const t = InvocationId.parse(m.target_invocation_id ?? '')!;
        sendTo(ctx, t.text, { kind: 'signal', signal: { invocation_id: t.bytes, ...(m.name !== undefined ? { name: m.name } : { idx: m.idx ?? 0 }), ...result(m) } });
      },
    },
  ],
  [
    MessageType.CompleteAwakeableCommand,
    {
      check: (_s, e) => (decodeAwakeableId(decode(pb.CompleteAwakeable, e.payload).awakeable_id ?? '') ? undefined : 'the awakeable id is not valid'),
      apply(ctx, _s, e) {
        const m = decode(pb.CompleteAwakeable, e.payload);
        const a = decodeAwakeableId(m.awakeable_id ?? '')!;
        sendTo(ctx, a.invocation.text, { kind: 'signal', signal: { invocation_id: a.invocation.bytes, idx: a.signalIndex, ...result(m) } });
      },
    },
  ],
  [MessageType.AttachInvocationCommand, attachRule(MessageType.AttachInvocationCompletion, pb.AttachInvocation)],
  [MessageType.GetInvocationOutputCommand, attachRule(MessageType.GetInvocationOutputCompletion, pb.GetInvocationOutput)],
];
