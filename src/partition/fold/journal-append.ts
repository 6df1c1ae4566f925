import { assert } from '../../common/assert.js';
import type { JournalAppend } from '../../log/commands.js';
import { MessageType, decode, encode, isNotification, pb } from '../../protocol/messages.js';
import type { InvocationResult, InvocationStatus, JournalEntry } from '../state.js';
import { liveAttemptOf, type FoldContext } from './context.js';
import { callEntries } from './entries-calls.js';
import { promiseEntries } from './entries-promises.js';
import { stateEntries } from './entries-state.js';
import { timerEntries } from './entries-timers.js';
import type { EntryRule } from './entry-rule.js';

const rules = new Map<number, EntryRule>([
  ...stateEntries,
  ...timerEntries,
  ...callEntries,
  ...promiseEntries,
  [MessageType.OutputCommand, { apply: (_ctx, s, e) => void (s.output = outputResult(e.payload)) }],
  [MessageType.RunCompletion, { apply: runCompleted }],
]);

/** An entry from the live attempt: a command it issued, or the completion of its `ctx.run`. */
export function foldJournalAppend(ctx: FoldContext, cmd: JournalAppend): void {
  const s = liveAttemptOf(ctx, cmd, 'journal_append');
  if (s === undefined) return;
  assert(cmd.entry_type !== undefined && cmd.entry_type > 0, () => `journal_append for ${s.id} without an entry type`);
  const entry = { type: cmd.entry_type, payload: cmd.entry ?? Buffer.alloc(0) };
  const rule = rules.get(cmd.entry_type);
  const violation = rule?.check?.(s, entry, cmd);
  if (violation !== undefined) {
    // This entry and every later one of the attempt are discarded: a new epoch drops them.
    s.epoch += 1;
    s.modified_at_ms = ctx.now_ms;
    ctx.actions.push({ kind: 'reject', id: s.id, epoch: s.epoch, error_code: 'RT0017', message: violation, entry_index: s.journal_length, entry_type: cmd.entry_type });
    ctx.state.putStatus(s);
    return;
  }
  const index = ctx.state.appendEntry(s, entry);
  s.modified_at_ms = ctx.now_ms;
  // A new command is progress (as Restate's invoker counts it): the next step's tries start from
  // none. A run's completion is a notification: the step that produced it is over, not the next begun.
  if (!isNotification(cmd.entry_type)) {
    s.retries_since_command = 0;
    s.command_at_ms = ctx.now_ms;
  } else if (cmd.entry_type === MessageType.RunCompletion && (s.retries_since_command ?? 0) > 0) {
    // The step's result: the attempts it took, for sys_journal (one is the rule, not recorded).
    const completion_id = decode(pb.Notification, entry.payload).completion_id ?? 0;
    s.step_attempts = { ...s.step_attempts, [completion_id]: s.retries_since_command! + 1 };
  }
  rule?.apply(ctx, s, entry, cmd, index);
  ctx.state.putStatus(s);
}

function runCompleted(ctx: FoldContext, s: InvocationStatus, entry: JournalEntry, cmd: JournalAppend): void {
  const n = decode(pb.Notification, entry.payload);
  const reply = cmd.requested_ack
    ? { type: MessageType.ProposeRunCompletionAck, payload: encode(pb.ProposeRunCompletionAck, { completion_id: n.completion_id ?? 0 }) }
    : entry;
  ctx.actions.push({ kind: 'forward', id: s.id, epoch: s.epoch, type: reply.type, payload: reply.payload });
}

function outputResult(payload: Buffer): InvocationResult {
  const out = decode(pb.Output, payload);
  if (out.failure) {
    const failure: NonNullable<InvocationResult['failure']> = { code: out.failure.code ?? 500, message: out.failure.message ?? '' };
    if (out.failure.metadata?.length) failure.metadata = out.failure.metadata.map((m) => ({ key: m.key ?? '', value: m.value ?? '' }));
    return { failure };
  }
  return { value: (out.value?.content ?? Buffer.alloc(0)).toString('base64') };
}
