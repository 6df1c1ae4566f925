// The replay check (Keel's own): the code behind an endpoint replays the journals of suspended
// invocations before it takes them over. Each replay is an attempt (attempt.ts) whose records go
// nowhere: Keel sends StartMessage and the journal as a real attempt would, closes its side at
// once, and the first thing the endpoint sends past the replay ends it — a new command, a
// suspension, the end — unless the SDK found the new code's commands differ from the journal
// first (an Error with code 570, RT0016). Nothing is appended to any log.
//
// Without side effects only for suspended invocations: the SDK compares each command with the
// journal before it acts on it, and a suspended invocation waits on a command in its journal, so
// a changed step is found before any new one runs. A paused or backing-off invocation may end on
// a `ctx.run` whose result is not in its journal: replayed, its closure would run again. Those
// are counted, never replayed (admin/replay-check.ts picks the invocations). One change defeats
// it (README says so): a `ctx.run` added after the last journaled command and before the await
// of an earlier one runs in the SDK as the replay reaches it, before its command reaches Keel.

import type { Logger } from '../common/logger.js';
import { assert } from '../common/assert.js';
import { Outcome, type AttemptEnded, type CommandKind } from '../log/commands.js';
import type { InvocationStatus } from '../partition/state.js';
import type { JournalEntry } from '../storage/tables/journal.js';
import { entryTypeName } from '../protocol/messages.js';
import type { EndpointClient } from '../endpoint/client.js';
import { Attempt, type AttemptDeployment, type AttemptFailure } from './attempt.js';

/** One invocation to replay: its status (suspended) and its stored journal. */
export interface ReplayCase {
  status: InvocationStatus;
  journal: readonly JournalEntry[];
}

export interface ReplayOptions {
  deployment: AttemptDeployment;
  protocol_version: number;
  endpoints: EndpointClient;
  /** A replay the endpoint does not answer within this long is `failed` (RT0001). */
  timeout_ms: number;
  message_size_limit_bytes: number;
  logger: Logger;
}

/** A journal entry named as the UI and `keel invocations explain` name it. */
export interface EntryRef {
  /** Its index in the journal (commands and notifications). */
  index?: number;
  /** Its index among the journal's commands (0 = the input), as SDKs count in errors. */
  command?: number;
  type?: string;
  name?: string;
}

/**
 * What a replay found. `compatible`: the new code issued every recorded command, then `next`
 * (a new command), suspended, or ended. `mismatch`: the SDK reported the first differing command
 * (RT0016) — `recorded` is the journal's entry at that index. `failed`: the replay could not
 * tell (the endpoint failed, was unreachable, or the handler threw while replaying).
 */
export type ReplayVerdict =
  | { id: string; target: string; verdict: 'compatible'; ended: 'new-command' | 'suspended' | 'completed'; next?: EntryRef }
  | { id: string; target: string; verdict: 'mismatch'; error_code: string; message: string; recorded?: EntryRef; new?: EntryRef }
  | { id: string; target: string; verdict: 'failed'; error_code: string; message: string };

const targetOf = (s: InvocationStatus): string => (s.key !== '' && s.service_type !== 'Service' ? `${s.service}/${s.key}/${s.handler}` : `${s.service}/${s.handler}`);

/** Replays one suspended invocation's journal against the endpoint; never rejects. */
export function replayOne(c: ReplayCase, o: ReplayOptions): Promise<ReplayVerdict> {
  assert(c.status.status === 'suspended', () => `only suspended invocations are replayed, not ${c.status.id} (${c.status.status})`);
  assert(c.journal.length === c.status.journal_length, () => `${c.status.id}: ${c.journal.length} journal entries, its status says ${c.status.journal_length}`);
  const id = c.status.id;
  const target = targetOf(c.status);
  return new Promise((resolve) => {
    let verdict: ReplayVerdict | undefined;
    /** A call or send past the journal: resolveCall sees it before anything is recorded. */
    let newCall: EntryRef | undefined;
    const attempt = new Attempt({
      status: c.status,
      journal: c.journal,
      deployment: o.deployment,
      protocol_version: o.protocol_version,
      // 0: our side closes right after the journal, so the endpoint suspends at its first await.
      inactivity_timeout_ms: 0,
      abort_timeout_ms: o.timeout_ms,
      message_size_limit_bytes: o.message_size_limit_bytes,
      append: async (kind) => {
        // A failed attempt records its end before it closes: onClose classifies the failure.
        const seen = recordedVerdict(id, target, c.journal.length, kind);
        if (seen === undefined) return;
        verdict ??= seen;
        // An attempt that ended (suspended, completed) closes its stream itself, without a reset.
        if (kind.kind === 'journal_append') attempt.abort();
      },
      onClose: (_outcome, failure) => {
        verdict ??= newCall !== undefined
          ? { id, target, verdict: 'compatible', ended: 'new-command', next: newCall }
          : failure !== undefined
            ? failureVerdict(id, target, c.journal, failure)
            : { id, target, verdict: 'failed', error_code: 'RT0012', message: 'the replay ended without a message from the endpoint' };
        resolve(verdict);
      },
      failed: () => ({ invocation_id: Buffer.alloc(0), epoch: c.status.epoch, outcome: Outcome.FAILED }) as AttemptEnded,
      // The SDK reads state from the journal while it replays; what it asks past it ends the replay.
      state: { entries: [], partial: true },
      resolveCall: (service, handler) => {
        newCall = { index: c.journal.length, type: 'Command: Call or OneWayCall', name: `${service}/${handler}` };
        return { error_code: 'RT0018', message: 'a replay makes no calls' };
      },
      endpoints: o.endpoints,
      logger: o.logger,
    });
    attempt.start();
  });
}

/** The first thing the attempt would have recorded: a new command, or how it ended (undefined: it failed). */
function recordedVerdict(id: string, target: string, journalLength: number, kind: CommandKind): ReplayVerdict | undefined {
  if (kind.kind === 'journal_append') {
    return { id, target, verdict: 'compatible', ended: 'new-command', next: { index: journalLength, type: entryTypeName(kind.journal_append.entry_type ?? 0) } };
  }
  if (kind.kind === 'attempt_ended' && kind.attempt_ended.outcome === Outcome.SUSPENDED) return { id, target, verdict: 'compatible', ended: 'suspended' };
  if (kind.kind === 'attempt_ended' && kind.attempt_ended.outcome === Outcome.END) return { id, target, verdict: 'compatible', ended: 'completed' };
  if (kind.kind === 'attempt_ended' && kind.attempt_ended.outcome === Outcome.FAILED) return undefined;
  return { id, target, verdict: 'failed', error_code: 'RT0012', message: `the replay recorded ${kind.kind}` };
}

function failureVerdict(id: string, target: string, journal: readonly JournalEntry[], f: AttemptFailure): ReplayVerdict {
  if (f.error_code !== 'RT0016') return { id, target, verdict: 'failed', error_code: f.error_code, message: f.message };
  // The SDK counts commands only (its related_command_index); notifications sit between them.
  const command = f.related_entry_index;
  const commands: Array<[index: number, type: string]> = [];
  journal.forEach((e, index) => {
    const type = entryTypeName(e.type);
    if (type.startsWith('Command:')) commands.push([index, type]);
  });
  const recorded = command !== undefined ? commands[command] : undefined;
  return {
    id,
    target,
    verdict: 'mismatch',
    error_code: f.error_code,
    message: f.message,
    ...(recorded !== undefined ? { recorded: { index: recorded[0], command, type: recorded[1] } } : {}),
    new: {
      ...(command !== undefined ? { command } : {}),
      ...(f.related_entry_type !== undefined ? { type: entryTypeName(f.related_entry_type) } : {}),
      ...(f.related_entry_name ? { name: f.related_entry_name } : {}),
    },
  };
}

/**
 * Replays `cases`, at most `concurrency` at a time, in their order; those not started by
 * `deadline_ms` (epoch ms) are `failed` without a replay, so that the check answers in time.
 */
export async function replayAll(cases: readonly ReplayCase[], o: ReplayOptions, concurrency: number, deadline_ms: number): Promise<ReplayVerdict[]> {
  assert(Number.isInteger(concurrency) && concurrency > 0, () => `a replay concurrency of ${concurrency}`);
  const verdicts: ReplayVerdict[] = new Array(cases.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < cases.length) {
      const i = next++;
      const c = cases[i]!;
      verdicts[i] = Date.now() < deadline_ms
        ? await replayOne(c, o)
        : { id: c.status.id, target: targetOf(c.status), verdict: 'failed', error_code: 'RT0001', message: 'not replayed: the check ran out of time (ask for a smaller sample)' };
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, cases.length) }, lane));
  return verdicts;
}
