import { assertNever } from '../../common/assert.js';
import { Outcome, Then, type AttemptEnded } from '../../log/commands.js';
import type { LastFailure } from '../state.js';
import { anyArrived, complete, liveAttemptOf, resume, type FoldContext } from './context.js';

/**
 * Failures the invoker records before it sends a StartMessage: no deployment for the service or
 * the one it is pinned to (RT0011), no protocol version in common (RT0013, RT0014).
 */
const NOT_INVOKED: ReadonlySet<string> = new Set(['RT0011', 'RT0013', 'RT0014']);

/**
 * The failed attempts a retry decision counts once the attempt of `s` fails with `error_code`
 * (1 for the first): those since the invocation's last journalled command, so each step (a
 * `ctx.run`, or whatever the handler does between two commands) has the whole retry policy to
 * itself and a flaky early step does not use up a later one's (restatedev/restate#4462). An
 * attempt that never reached the endpoint tried no step: it counts against the invocation's
 * total, which keeps a service with no usable deployment from retrying forever.
 */
export function failedAttempts(s: { retry_count: number; retries_since_command?: number | undefined }, error_code: string): number {
  return (NOT_INVOKED.has(error_code) ? s.retry_count : (s.retries_since_command ?? s.retry_count)) + 1;
}

/** The live attempt ended: the invocation completed, suspended, or failed. */
export function foldAttemptEnded(ctx: FoldContext, cmd: AttemptEnded): void {
  const s = liveAttemptOf(ctx, cmd, 'attempt_ended');
  if (s === undefined) return;
  if (cmd.sdk_version) s.sdk_version = cmd.sdk_version;
  s.modified_at_ms = ctx.now_ms;
  const outcome = (cmd.outcome ?? Outcome.END) as (typeof Outcome)[keyof typeof Outcome];
  switch (outcome) {
    case Outcome.END:
      complete(ctx, s, s.output ?? { failure: { code: 500, message: 'the handler ended without an output' } });
      break;
    case Outcome.SUSPENDED: {
      const waiting = {
        completions: cmd.waiting_completions ?? [],
        signals: cmd.waiting_signals ?? [],
        named_signals: cmd.waiting_named_signals ?? [],
      };
      if (anyArrived(ctx.state.journal(s.id), waiting)) {
        resume(ctx, s);
      } else {
        s.status = 'suspended';
        s.waiting = waiting;
      }
      break;
    }
    case Outcome.FAILED: {
      const failure: LastFailure = {
        error_code: cmd.error_code || 'RT0006',
        failure_code: cmd.failure_code ?? 500,
        message: cmd.failure_message ?? '',
      };
      if (cmd.related_entry_index !== undefined) failure.related_entry_index = cmd.related_entry_index;
      if (cmd.related_entry_name) failure.related_entry_name = cmd.related_entry_name;
      if (cmd.related_entry_type !== undefined) failure.related_entry_type = cmd.related_entry_type;
      s.last_failure = failure;
      // A wait the endpoint asked for (Retry-After) uses none of the retry budget.
      if (!cmd.free_retry) {
        // An attempt that never reached the endpoint tried no step (Restate does not count it either).
        if (!NOT_INVOKED.has(failure.error_code)) s.retries_since_command = (s.retries_since_command ?? s.retry_count) + 1;
        s.retry_count += 1;
      }
      const then = (cmd.then ?? Then.RETRY) as (typeof Then)[keyof typeof Then];
      switch (then) {
        case Then.RETRY:
          s.status = 'backing-off';
          s.next_retry_at_ms = cmd.retry_at_ms ?? ctx.now_ms;
          ctx.actions.push({ kind: 'retry', id: s.id, epoch: s.epoch, at_ms: s.next_retry_at_ms });
          break;
        case Then.PAUSE:
          s.status = 'paused';
          break;
        case Then.FAIL:
          complete(ctx, s, { failure: { code: failure.failure_code, message: failure.message } });
          break;
        default:
          assertNever(then, 'AttemptEnded.then');
      }
      break;
    }
    default:
      assertNever(outcome, 'AttemptEnded.outcome');
  }
  ctx.state.putStatus(s);
}
