import { MessageType, decode, pb } from '../../protocol/messages.js';
import { objectKeyOf, type InvocationStatus } from '../state.js';
import { notification, notify, type FoldContext } from './context.js';
import type { EntryRule } from './entry-rule.js';

// State of virtual objects and workflows: per key, written when the command is journalled.

const hasState = (s: InvocationStatus) => s.service_type === 'VirtualObject' || s.service_type === 'Workflow';
const canWrite = (s: InvocationStatus) => hasState(s) && (s.handler_type === 'Exclusive' || s.handler_type === 'Workflow');

const read: EntryRule['check'] = (s) =>
  hasState(s) ? undefined : `service '${s.service}' is a Service: state operations are only allowed in virtual objects and workflows`;
const write: EntryRule['check'] = (s) =>
  !hasState(s)
    ? `service '${s.service}' is a Service: state operations are only allowed in virtual objects and workflows`
    : canWrite(s)
      ? undefined
      : `handler '${s.service}/${s.handler}' is shared: it may read state but not write it`;

const b64 = (key: Buffer | undefined) => (key ?? Buffer.alloc(0)).toString('base64url');

export const stateEntries: Array<[number, EntryRule]> = [
  [MessageType.GetEagerStateCommand, { check: read, apply() {} }],
  [MessageType.GetEagerStateKeysCommand, { check: read, apply() {} }],
  [
    MessageType.SetStateCommand,
    {
      check: write,
      apply(ctx, s, e) {
        const m = decode(pb.SetState, e.payload);
        const objectKey = objectKeyOf(s.service, s.key, s.scope);
        ctx.state.setState(objectKey, b64(m.key), m.value?.content ?? Buffer.alloc(0));
        ctx.state.ttl.touch(s.service, objectKey, ctx.now_ms, 'write');
      },
    },
  ],
  [
    MessageType.ClearStateCommand,
    {
      check: write,
      apply(ctx, s, e) {
        const objectKey = objectKeyOf(s.service, s.key, s.scope);
        ctx.state.setState(objectKey, b64(decode(pb.ClearState, e.payload).key), null);
        ctx.state.ttl.touch(s.service, objectKey, ctx.now_ms, 'write');
      },
    },
  ],
  [
    MessageType.ClearAllStateCommand,
    {
      check: write,
      apply(ctx, s) {
        const objectKey = objectKeyOf(s.service, s.key, s.scope);
        ctx.state.clearState(objectKey);
        ctx.state.ttl.touch(s.service, objectKey, ctx.now_ms, 'write');
      },
    },
  ],
  [
    MessageType.GetLazyStateCommand,
    {
      check: read,
      apply(ctx: FoldContext, s, e) {
        const m = decode(pb.GetLazyState, e.payload);
        const value = ctx.state.stateValue(objectKeyOf(s.service, s.key, s.scope), b64(m.key));
        const id = m.result_completion_id ?? 0;
        notify(ctx, s, notification(MessageType.GetLazyStateCompletion, { completion_id: id, ...(value === undefined ? { void: {} } : { value: { content: value } }) }), { completion: id });
      },
    },
  ],
  [
    MessageType.GetLazyStateKeysCommand,
    {
      check: read,
      apply(ctx: FoldContext, s, e) {
        const m = decode(pb.GetLazyStateKeys, e.payload);
        const keys = ctx.state.stateKeys(objectKeyOf(s.service, s.key, s.scope)).map((k) => Buffer.from(k, 'base64url'));
        const id = m.result_completion_id ?? 0;
        notify(ctx, s, notification(MessageType.GetLazyStateKeysCompletion, { completion_id: id, state_keys: { keys } }), { completion: id });
      },
    },
  ],
];
