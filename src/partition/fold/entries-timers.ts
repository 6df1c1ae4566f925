import { TimerKind } from '../../log/commands.js';
import { MessageType, decode, pb } from '../../protocol/messages.js';
import type { EntryRule } from './entry-rule.js';

export const timerEntries: Array<[number, EntryRule]> = [
  [
    MessageType.SleepCommand,
    {
      apply(ctx, s, e) {
        const sleep = decode(pb.Sleep, e.payload);
        const timer = { id: s.id, completion_id: sleep.result_completion_id ?? 0, wake_up_ms: Number(sleep.wake_up_time ?? 0), kind: TimerKind.SLEEP };
        ctx.state.putTimer(timer);
        ctx.actions.push({ kind: 'timer', timer });
      },
    },
  ],
];
