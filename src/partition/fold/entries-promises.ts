import { MessageType, decode, pb, type Notification } from '../../protocol/messages.js';
import { promiseKeyOf, type InvocationStatus, type PromiseState } from '../state.js';
import { notification, notify, type FoldContext } from './context.js';
import type { EntryRule } from './entry-rule.js';

// Durable promises of workflows. Every handler of one workflow key lives in the same
// partition, so waiting invocations are notified directly.

const onlyWorkflows: EntryRule['check'] = (s) =>
  s.service_type === 'Workflow' ? undefined : `service '${s.service}' is not a workflow: durable promises are only available in workflows`;

type Result = Pick<Notification, 'value' | 'failure' | 'void'>;

function promiseResult(p: PromiseState | undefined): Result | undefined {
  if (p?.failure) return { failure: { code: p.failure.code, message: p.failure.message } };
  if (p?.value !== undefined) return { value: { content: Buffer.from(p.value, 'base64') } };
  return undefined;
}

function reply(ctx: FoldContext, s: InvocationStatus, type: number, completion_id: number, result: Result): void {
  notify(ctx, s, notification(type, { completion_id, ...result }), { completion: completion_id });
}

export const promiseEntries: Array<[number, EntryRule]> = [
  [
    MessageType.GetPromiseCommand,
    {
      check: onlyWorkflows,
      apply(ctx, s, e) {
        const m = decode(pb.GetPromise, e.payload);
        const key = promiseKeyOf(s.service, s.key, m.key ?? '', s.scope);
        const p = ctx.state.promiseOf(key);
        const id = m.result_completion_id ?? 0;
        const r = promiseResult(p);
        if (r !== undefined) return reply(ctx, s, MessageType.GetPromiseCompletion, id, r);
        ctx.state.putPromise(key, { waiters: [...(p?.waiters ?? []), { id: s.id, completion_id: id, entry_type: MessageType.GetPromiseCompletion }] });
      },
    },
  ],
  [
    MessageType.PeekPromiseCommand,
    {
      check: onlyWorkflows,
      apply(ctx, s, e) {
        const m = decode(pb.PeekPromise, e.payload);
        const p = ctx.state.promiseOf(promiseKeyOf(s.service, s.key, m.key ?? '', s.scope));
        reply(ctx, s, MessageType.PeekPromiseCompletion, m.result_completion_id ?? 0, promiseResult(p) ?? { void: {} });
      },
    },
  ],
  [
    MessageType.CompletePromiseCommand,
    {
      check: onlyWorkflows,
      apply(ctx, s, e) {
        const m = decode(pb.CompletePromise, e.payload);
        const key = promiseKeyOf(s.service, s.key, m.key ?? '', s.scope);
        const p = ctx.state.promiseOf(key);
        const id = m.result_completion_id ?? 0;
        if (promiseResult(p) !== undefined) {
          return reply(ctx, s, MessageType.CompletePromiseCompletion, id, { failure: { code: 409, message: 'promise was already completed' } });
        }
        const done: PromiseState = m.completion_failure
          ? { failure: { code: m.completion_failure.code ?? 500, message: m.completion_failure.message ?? '' }, waiters: [] }
          : { value: (m.completion_value?.content ?? Buffer.alloc(0)).toString('base64'), waiters: [] };
        ctx.state.putPromise(key, done);
        reply(ctx, s, MessageType.CompletePromiseCompletion, id, { void: {} });
        for (const w of p?.waiters ?? []) {
          const waiter = ctx.state.status(w.id);
          if (waiter === undefined || waiter.status === 'completed') continue;
          notify(ctx, waiter, notification(w.entry_type, { completion_id: w.completion_id, ...promiseResult(done)! }), { completion: w.completion_id });
          ctx.state.putStatus(waiter);
        }
      },
    },
  ],
];
