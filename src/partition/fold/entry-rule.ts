import type { JournalAppend } from '../../log/commands.js';
import type { InvocationStatus, JournalEntry } from '../state.js';
import type { FoldContext } from './context.js';

/**
 * What a command entry does beyond being journalled. `check` returns a precondition failure
 * message (RT0017) instead of acting when the entry is not allowed here; then nothing is recorded.
 */
export interface EntryRule {
  check?(s: InvocationStatus, entry: JournalEntry, cmd: JournalAppend): string | undefined;
  apply(ctx: FoldContext, s: InvocationStatus, entry: JournalEntry, cmd: JournalAppend, index: number): void;
}
