import type { FlowQueue, LimitRule as RuleMsg, LimitRules } from '../../log/commands.js';
import type { LimitRule, RuleBook } from '../../common/limit-rules.js';
import { endWait, startWait, waitReason, type FoldContext } from './context.js';

/**
 * The rule book changed: a newer book replaces the partition's (a repeat or an older one, from
 * a node that was behind, changes nothing). Waiters are looked at again: a limit may have risen.
 */
export function foldLimitRules(ctx: FoldContext, cmd: LimitRules): void {
  const version = cmd.version ?? 0;
  if (version <= ctx.state.flow.rules.book.version) return;
  const book: RuleBook = { version, rules: (cmd.rules ?? []).map((r) => ruleOf(r, ctx.now_ms)) };
  ctx.state.flow.setRules(book, true);
  ctx.state.flow.resetRates();
}

/** The book as a LimitRules command carries it (the fold reads it back with `ruleOf`); descriptions stay in the metadata. */
export function limitRulesCommand(book: RuleBook): LimitRules {
  return {
    version: book.version,
    rules: book.rules.map((r) => ({
      pattern: r.pattern,
      concurrency: r.concurrency ?? 0,
      disabled: r.disabled,
      version: r.version,
      ...(r.rate !== undefined ? { rate_starts: r.rate.starts, rate_interval_ms: r.rate.interval_ms } : {}),
      ...(r.backlog !== undefined ? { backlog: r.backlog } : {}),
    })),
  };
}

function ruleOf(r: RuleMsg, now_ms: number): LimitRule {
  return {
    pattern: r.pattern ?? '',
    ...(r.concurrency ? { concurrency: r.concurrency } : {}),
    ...(r.rate_starts && r.rate_interval_ms ? { rate: { starts: r.rate_starts, interval_ms: r.rate_interval_ms } } : {}),
    ...(r.backlog !== undefined ? { backlog: r.backlog } : {}),
    disabled: r.disabled ?? false,
    version: r.version ?? 0,
    last_modified_ms: now_ms,
  };
}

/**
 * An operator pauses or resumes a (scope, limit key) queue; resumed, its waiters may start in this
 * fold. Its waiters' waits stop counting while it is paused (O(waiters), on an operator's command).
 */
export function foldFlowQueue(ctx: FoldContext, cmd: FlowQueue): void {
  if (!cmd.scope) return;
  const limitKey = cmd.limit_key ?? '';
  ctx.state.flow.setPaused(cmd.scope, limitKey, cmd.paused ?? false);
  for (const e of ctx.state.flow.queues.get(cmd.scope)?.get(limitKey) ?? []) {
    const s = ctx.state.status(e.id);
    if (s === undefined) continue;
    endWait(ctx, s);
    startWait(ctx, s, waitReason(ctx, cmd.scope, limitKey));
    ctx.state.putStatus(s);
  }
}
