// Leader epochs in a shared log: which records every reader keeps.
//
// Several nodes can write a partition's log in Kafka; one leads at a time. A node leads only
// once it has appended an announcement with an epoch above every one before it and read it
// back; each command carries its writer's epoch and its position (numbered from 1, one after
// the other, as in the embedded log). Every reader — the leader's own catch-up, a follower, a
// rebuild — keeps exactly the commands of the epoch announced last before them, in position
// order, and drops the rest: a deposed leader's late writes (after the announcement that
// replaced it), a resent duplicate. So all readers fold the same commands in the same order.
import { assert } from '../common/assert.js';

/** Where a reader stands: the epoch announced last and the last position kept. */
export interface EpochState {
  epoch: number;
  position: number;
}

export type LogEntry =
  | { kind: 'announce'; epoch: number; node: string }
  | { kind: 'command'; epoch: number; position: number };

/** What a reader does with an entry. */
export type Verdict = 'keep' | 'announced' | 'stale_announcement' | 'deposed' | 'duplicate';

export class CorruptLogError extends Error {
  override readonly name = 'CorruptLogError';
}

/**
 * Applies one entry to `state` (updated in place) and says what became of it. Throws
 * CorruptLogError where no writer following the rules could have produced the entry (a command
 * of an epoch never announced, a gap in the positions).
 */
export function judge(state: EpochState, entry: LogEntry): Verdict {
  assert(Number.isSafeInteger(entry.epoch) && entry.epoch >= 0, () => `log entry with epoch ${entry.epoch}`);
  if (entry.kind === 'announce') {
    if (entry.epoch <= state.epoch) return 'stale_announcement';
    state.epoch = entry.epoch;
    return 'announced';
  }
  if (entry.epoch < state.epoch) return 'deposed';
  if (entry.epoch > state.epoch) throw new CorruptLogError(`a command of epoch ${entry.epoch} before its announcement (last announced: ${state.epoch})`);
  if (entry.position <= state.position) return 'duplicate';
  if (entry.position !== state.position + 1) throw new CorruptLogError(`position ${entry.position} follows ${state.position} in epoch ${entry.epoch}`);
  state.position = entry.position;
  return 'keep';
}
