// What a partition knows of flow control: the rule book it folds with, the concurrency counters
// of its scopes (how many invocations of each scope, scope/l1 and scope/l1/l2 hold a slot: run
// or back off), and the queues of invocations waiting for a slot, one per (scope, limit key).
// The counters live in the partition's `fsm` counters and the queues in table `vq`, so a
// restart, a rebuild and a standby all see what the log made of them.
import { assert } from '../common/assert.js';
import { EMPTY_RULE_BOOK, LEVELS, RuleIndex, counterKeys, type Level, type RuleBook } from '../common/limit-rules.js';
import { limitsTable } from '../storage/tables/limits.js';
import type { Counters } from '../storage/tables/fsm.js';
import { vqueuesTable, type VqueueEntry } from '../storage/tables/vqueues.js';

/** What flow control writes through: the partition's batch and its counters. */
export interface FlowStore {
  readonly partition: number;
  write(key: string, value: Buffer | null): void;
  /** The partition's counters: flow control keeps its `usage`, `tags`, `rate` and `paused` there. */
  counters(): Pick<Counters, 'usage' | 'tags' | 'rate' | 'paused'>;
  countersChanged(): void;
  nextSeq(): number;
}

/** A concurrency counter as `sys_user_limits` shows it. */
export interface UserLimitRow {
  scope: string;
  l1: string | undefined;
  l2: string | undefined;
  level: Level;
  usage: number;
  concurrency_limit: number | undefined;
  rule_pattern: string | undefined;
  available: number | undefined;
  num_waiters: number;
}

/** A level whose rule's backlog is full: which rule, how many wait, its backlog, when to try again. */
export interface BacklogFull {
  pattern: string;
  waiting: number;
  backlog: number;
  retry_after_s: number;
}

export class FlowControl {
  rules = new RuleIndex(EMPTY_RULE_BOOK);
  /**
   * Scope → limit key ('' for none) → invocations waiting for a slot, in arrival order. Each is
   * a live invocation: bounded by the live limit (MAX_LIVE_INVOCATIONS_PER_PARTITION).
   */
  readonly queues = new Map<string, Map<string, VqueueEntry[]>>();
  /** Scopes where a slot was freed, or waiters may now run, during the command being folded. */
  readonly released = new Set<string>();
  /** The time of the command being folded (rate limits read it; set by the fold, never a clock). */
  now_ms = 0;

  constructor(private readonly store: FlowStore) {}

  /** The rule book of the log (loaded, or from a LimitRules command): every scope with waiters is looked at again. */
  setRules(book: RuleBook, write: boolean): void {
    this.rules = new RuleIndex(book);
    if (write) this.store.write(limitsTable.key(this.store.partition), limitsTable.encode(book));
    for (const scope of this.queues.keys()) this.released.add(scope);
  }

  /** Invocations of one queue (scope, limit key) that hold a slot: running or backing off. */
  queueUsage(scope: string, limitKey: string): number {
    return this.usageOf(ownCounter(scope, limitKey));
  }

  usageOf(counterKey: string): number {
    return this.store.counters().usage[counterKey] ?? 0;
  }

  /** The deepest counter of (scope, limit key) whose slots are all taken, if any: what it waits on. */
  fullCounter(scope: string, limitKey: string): string | undefined {
    const keys = counterKeys(scope, limitKey);
    for (let i = keys.length - 1; i >= 0; i--) {
      const limit = this.rules.limitOf(keys[i]!);
      if (limit !== undefined && this.usageOf(keys[i]!) >= limit) return keys[i];
    }
    return undefined;
  }

  /** Whether every counter of (scope, limit key) has room for one more, now: a slot, and its rate. */
  hasRoom(scope: string, limitKey: string): boolean {
    return this.fullCounter(scope, limitKey) === undefined && this.rateReadyAt(scope, limitKey) <= this.now_ms;
  }

  /** When the rate limits of (scope, limit key) let one more start (0 without any). */
  rateReadyAt(scope: string, limitKey: string): number {
    if (!this.rules.hasRates) return 0;
    const rate = this.store.counters().rate;
    let at = 0;
    for (const k of counterKeys(scope, limitKey)) {
      if (this.rules.ruleOf(k)?.rate !== undefined) at = Math.max(at, rate[k] ?? 0);
    }
    return at;
  }

  /**
   * The earliest time a queue head of `scope` that has a slot but waits for its rate may start,
   * or undefined (none does: a freed slot will wake them). The fold sets a timer for it.
   */
  wakeAt(scope: string): { at_ms: number; seq: number; id: string } | undefined {
    let best: { at_ms: number; seq: number; id: string } | undefined;
    for (const [limitKey, q] of this.queues.get(scope) ?? []) {
      const head = q[0];
      if (head === undefined || this.isPaused(scope, limitKey) || this.fullCounter(scope, limitKey) !== undefined) continue;
      const ready = this.rateReadyAt(scope, limitKey);
      if (ready <= this.now_ms) continue;
      // Ordered by time, then sequence: nothing here depends on the order of the Maps (which a reload changes).
      if (best === undefined || ready < best.at_ms || (ready === best.at_ms && head.seq < best.seq)) best = { at_ms: ready, seq: head.seq, id: head.id };
    }
    return best;
  }

  /** A rule book changed: a counter no longer rate-limited forgets its next start; the others wait at most one new spacing. */
  resetRates(): void {
    const rate = this.store.counters().rate;
    for (const k of Object.keys(rate)) {
      const r = this.rules.ruleOf(k)?.rate;
      if (r === undefined) delete rate[k];
      else rate[k] = Math.min(rate[k]!, this.now_ms + r.interval_ms / r.starts);
    }
    this.store.countersChanged();
  }

  /**
   * Whether an invocation of (scope, limit key) arriving at `at_ms` (the fold's time unless given:
   * the ingress asks at its own clock) starts at once: no one ahead of it in its queue, the queue
   * not paused, a slot and its rate free.
   */
  mayRun(scope: string, limitKey: string, at_ms = this.now_ms): boolean {
    return (
      (this.queues.get(scope)?.get(limitKey)?.length ?? 0) === 0 &&
      !this.isPaused(scope, limitKey) &&
      this.fullCounter(scope, limitKey) === undefined &&
      this.rateReadyAt(scope, limitKey) <= at_ms
    );
  }

  isPaused(scope: string, limitKey: string): boolean {
    return this.store.counters().paused[tagOf(scope, limitKey)] !== undefined;
  }

  /** An operator pauses or resumes a queue; a resumed one's waiters are looked at after the command. */
  setPaused(scope: string, limitKey: string, paused: boolean): void {
    const all = this.store.counters().paused;
    if (paused) all[tagOf(scope, limitKey)] = 1;
    else delete all[tagOf(scope, limitKey)];
    this.store.countersChanged();
    this.released.add(scope);
  }

  /** The queues paused, as (scope, limit key). */
  pausedQueues(): Array<[scope: string, limitKey: string]> {
    return Object.keys(this.store.counters().paused).map((k) => {
      const cut = k.indexOf(':');
      return [k.slice(0, cut), k.slice(cut + 1)];
    });
  }

  /** An invocation starts or stops holding a slot: its counters move by `delta`. */
  hold(scope: string, limitKey: string, delta: 1 | -1): void {
    const usage = this.store.counters().usage;
    for (const k of counterKeys(scope, limitKey)) {
      const n = (usage[k] ?? 0) + delta;
      assert(n >= 0, () => `partition ${this.store.partition}: ${n} invocations hold a slot of ${k}`);
      if (n === 0) delete usage[k];
      else usage[k] = n;
    }
    if (delta > 0 && this.rules.hasRates) this.spendRate(scope, limitKey);
    this.store.countersChanged();
    if (delta < 0) this.released.add(scope);
  }

  /**
   * A start under rate-limited counters: each one's next start moves one spacing (interval /
   * starts) on — from when this start was due, when it comes late by less than a spacing (a timer
   * fires a few ms after its time: counted from the start itself, every late wake-up would lower
   * the rate), else from now (after an idle spell: no burst of saved-up starts).
   */
  private spendRate(scope: string, limitKey: string): void {
    const rate = this.store.counters().rate;
    for (const k of counterKeys(scope, limitKey)) {
      const r = this.rules.ruleOf(k)?.rate;
      if (r === undefined) continue;
      const spacing = r.interval_ms / r.starts;
      const due = rate[k];
      rate[k] = (due !== undefined && this.now_ms - due <= spacing ? due : this.now_ms) + spacing;
    }
    // Bounded: what lies in the past no longer limits anything.
    const keys = Object.keys(rate);
    if (keys.length > MAX_RATE_ENTRIES_BEFORE_PRUNE) for (const k of keys) if (rate[k]! <= this.now_ms) delete rate[k];
  }

  /** Queues `id` behind those of its priority or higher, ahead of any lower. Returns its sequence. */
  enqueue(scope: string, limitKey: string, id: string, priority = 0): number {
    const seq = this.store.nextSeq();
    let byKey = this.queues.get(scope);
    if (byKey === undefined) this.queues.set(scope, (byKey = new Map()));
    let q = byKey.get(limitKey);
    if (q === undefined) {
      byKey.set(limitKey, (q = []));
      // A queue that starts (again) starts at the scope's virtual time: no credit for having been idle.
      const tags = this.store.counters().tags;
      tags[tagOf(scope, limitKey)] = tags[scope] ?? 0;
    }
    const e = { id, seq, priority };
    // Usually at the end (equal priorities); the queue is bounded by the live limit.
    let at = q.length;
    while (at > 0 && q[at - 1]!.priority < priority) at--;
    q.splice(at, 0, e);
    this.store.write(vqueuesTable.key(this.store.partition, scope, limitKey, e), vqueuesTable.encode(id));
    return seq;
  }

  /** Loads a queue entry from the store (recovery: entries come in key order). */
  load(scope: string, limitKey: string, e: VqueueEntry): void {
    let byKey = this.queues.get(scope);
    if (byKey === undefined) this.queues.set(scope, (byKey = new Map()));
    const q = byKey.get(limitKey) ?? [];
    const last = q[q.length - 1];
    assert(last === undefined || last.priority > e.priority || (last.priority === e.priority && last.seq < e.seq), () => `partition ${this.store.partition}: vqueue ${scope}:${limitKey} out of order at ${e.seq}`);
    q.push(e);
    byKey.set(limitKey, q);
  }

  /** Takes `id` out of its queue: `served` when it leaves to run (the queue's fair-queuing tag advances). */
  remove(scope: string, limitKey: string, id: string, served = false): void {
    const byKey = this.queues.get(scope);
    const q = byKey?.get(limitKey);
    const i = q?.findIndex((e) => e.id === id) ?? -1;
    if (q === undefined || i < 0) return;
    const [e] = q.splice(i, 1);
    this.store.write(vqueuesTable.key(this.store.partition, scope, limitKey, e!), null);
    const tags = this.store.counters().tags;
    const tag = tagOf(scope, limitKey);
    if (served) {
      tags[scope] = tags[tag] ?? 0;
      tags[tag] = (tags[tag] ?? 0) + 1;
    }
    if (q.length === 0) {
      byKey!.delete(limitKey);
      delete tags[tag];
    }
    if (byKey!.size === 0) {
      this.queues.delete(scope);
      delete tags[scope];
    }
    this.store.countersChanged();
    // The next in its queue may run now.
    this.released.add(scope);
  }

  /**
   * The queue of `scope` whose head should take the next slot: among queues whose counters all
   * have room, the head of highest priority, then start-time fair queuing — the lowest virtual tag (each start from a queue advances
   * its tag by one, a new queue starts at the scope's virtual time), so a tenant with a long
   * queue cannot starve one with a short one; then the fewest running at the queue's own level,
   * then the earliest head. Deterministic from the state alone, as the fold must be.
   * O(queues of the scope).
   */
  next(scope: string): { limitKey: string; entry: VqueueEntry } | undefined {
    const byKey = this.queues.get(scope);
    if (byKey === undefined) return undefined;
    const tags = this.store.counters().tags;
    let best: { limitKey: string; entry: VqueueEntry; tag: number; usage: number } | undefined;
    for (const [limitKey, q] of byKey) {
      const head = q[0];
      if (head === undefined || this.isPaused(scope, limitKey) || !this.hasRoom(scope, limitKey)) continue;
      const usage = this.usageOf(ownCounter(scope, limitKey));
      const tag = tags[tagOf(scope, limitKey)] ?? 0;
      if (best === undefined || before({ priority: head.priority, tag, usage, seq: head.seq }, { priority: best.entry.priority, tag: best.tag, usage: best.usage, seq: best.entry.seq })) {
        best = { limitKey, entry: head, tag, usage };
      }
    }
    return best;
  }

  /**
   * Per rule pattern, the slots held under it (an invocation counts once at each level a rule
   * governs), the invocations waiting on its concurrency (the deepest level without room) and
   * those waiting on its rate (a slot free, the rate not). For /metrics; O(counters + queues).
   */
  perRule(into: Map<string, { running: number; queued: number; throttled: number }>): void {
    const at = (pattern: string) => {
      let e = into.get(pattern);
      if (e === undefined) into.set(pattern, (e = { running: 0, queued: 0, throttled: 0 }));
      return e;
    };
    for (const [key, n] of Object.entries(this.store.counters().usage)) {
      const rule = this.rules.ruleOf(key);
      if (rule !== undefined) at(rule.pattern).running += n;
    }
    for (const [scope, byKey] of this.queues) {
      for (const [limitKey, q] of byKey) {
        const full = this.fullCounter(scope, limitKey);
        const blocking = full ?? this.rateCounter(scope, limitKey);
        const rule = blocking === undefined ? undefined : this.rules.ruleOf(blocking);
        if (rule === undefined) continue;
        if (full !== undefined) at(rule.pattern).queued += q.length;
        else at(rule.pattern).throttled += q.length;
      }
    }
  }

  /** The deepest rate-limited counter of (scope, limit key) whose next start is still ahead, if any. */
  private rateCounter(scope: string, limitKey: string): string | undefined {
    const rate = this.store.counters().rate;
    const keys = counterKeys(scope, limitKey);
    for (let i = keys.length - 1; i >= 0; i--) {
      if (this.rules.ruleOf(keys[i]!)?.rate !== undefined && (rate[keys[i]!] ?? 0) > this.now_ms) return keys[i];
    }
    return undefined;
  }

  /**
   * One row per live counter (usage > 0, or waiters blocked on it), as Restate's
   * `sys_user_limits`: its level, usage, the governing rule and limit, and the waiters whose
   * queue is blocked on it (their deepest full level).
   */
  userLimits(): UserLimitRow[] {
    const waiters = new Map<string, number>();
    for (const [scope, byKey] of this.queues) {
      for (const [limitKey, q] of byKey) {
        const blocking = this.fullCounter(scope, limitKey);
        if (blocking !== undefined) waiters.set(blocking, (waiters.get(blocking) ?? 0) + q.length);
      }
    }
    const keys = new Set([...Object.keys(this.store.counters().usage), ...waiters.keys()]);
    return [...keys].sort().map((key) => {
      const [scope, l1, l2] = key.split('/') as [string, string | undefined, string | undefined];
      const rule = this.rules.ruleOf(key);
      const usage = this.usageOf(key);
      const limit = rule?.concurrency;
      return {
        scope, l1, l2, level: LEVELS[key.split('/').length - 1]!, usage, concurrency_limit: limit, rule_pattern: rule?.pattern,
        available: limit === undefined ? undefined : Math.max(0, limit - usage), num_waiters: waiters.get(key) ?? 0,
      };
    });
  }

  /**
   * Why a new invocation of (scope, limit key) is refused: a level whose rule has a backlog limit
   * already has that many waiting. Read by the ingress before it appends (the bound may be passed
   * by the requests in flight at once, never by more).
   */
  backlogFull(scope: string, limitKey: string, now_ms: number): BacklogFull | undefined {
    for (const k of counterKeys(scope, limitKey)) {
      const rule = this.rules.ruleOf(k);
      if (rule?.backlog === undefined) continue;
      const waiting = this.waitingUnder(scope, k);
      // A backlog of 0 refuses only what would have to wait — judged at `now_ms` (the ingress's
      // clock: a quiet partition's last command may be long past, and a refusal appends nothing).
      if (waiting < rule.backlog || (waiting === 0 && this.mayRun(scope, limitKey, now_ms))) continue;
      // With a rate, when the backlog will have drained; else a second.
      const retry_after_s = rule.rate === undefined ? 1 : Math.max(1, Math.ceil((waiting * rule.rate.interval_ms) / rule.rate.starts / 1000));
      return { pattern: rule.pattern, waiting, backlog: rule.backlog, retry_after_s };
    }
    return undefined;
  }

  /** Invocations waiting under a counter (`scope`, `scope/l1`, `scope/l1/l2`): its queues and those below it. */
  private waitingUnder(scope: string, counterKey: string): number {
    let n = 0;
    for (const [limitKey, q] of this.queues.get(scope) ?? []) {
      const own = ownCounter(scope, limitKey);
      if (own === counterKey || own.startsWith(`${counterKey}/`)) n += q.length;
    }
    return n;
  }

  /**
   * The queues as `sys_vqueue_meta` shows them: those with waiters, and those paused. Running is
   * the count of the queue's own counter (its deepest level: for no limit key, the whole scope).
   */
  queueRows(): Array<{ scope: string; limit_key: string; paused: boolean; waiting: number; running: number; head?: string; tail?: string }> {
    const rows = new Map<string, { scope: string; limit_key: string; paused: boolean; waiting: number; running: number; head?: string; tail?: string }>();
    const own = (scope: string, limitKey: string) => this.usageOf(ownCounter(scope, limitKey));
    for (const [scope, byKey] of this.queues) {
      for (const [limitKey, q] of byKey) {
        rows.set(tagOf(scope, limitKey), { scope, limit_key: limitKey, paused: this.isPaused(scope, limitKey), waiting: q.length, running: own(scope, limitKey), head: q[0]?.id, tail: q[q.length - 1]?.id });
      }
    }
    for (const [scope, limitKey] of this.pausedQueues()) {
      if (!rows.has(tagOf(scope, limitKey))) rows.set(tagOf(scope, limitKey), { scope, limit_key: limitKey, paused: true, waiting: 0, running: own(scope, limitKey) });
    }
    return [...rows.values()];
  }

  /**
   * What each queue waits on, as `sys_scheduler` shows it: paused by an operator, a full
   * concurrency level (the deepest, with its rule), or its rate (until when).
   */
  schedulerRows(): Array<{ scope: string; limit_key: string; waiting: number; head: string; blocked_on: string; blocked: Record<string, unknown>; ready_at_ms?: number }> {
    const rows = [];
    for (const [scope, byKey] of this.queues) {
      for (const [limitKey, q] of byKey) {
        const head = q[0];
        if (head === undefined) continue;
        const base = { scope, limit_key: limitKey, waiting: q.length, head: head.id };
        const resource = { scope, limit_key: limitKey };
        if (this.isPaused(scope, limitKey)) {
          rows.push({ ...base, blocked_on: 'paused', blocked: { resource: 'paused', ...resource } });
          continue;
        }
        const full = this.fullCounter(scope, limitKey);
        if (full !== undefined) {
          const level = LEVELS[full.split('/').length - 1]!;
          const blocked_level = level === 'Scope' ? 'scope' : level === 'Level1' ? 'level1' : 'level2';
          rows.push({ ...base, blocked_on: 'limit-key-concurrency', blocked: { resource: 'limit-key-concurrency', ...resource, blocked_level, blocked_rule: this.rules.ruleOf(full)?.pattern } });
          continue;
        }
        const ready = this.rateReadyAt(scope, limitKey);
        rows.push({ ...base, blocked_on: 'rate', blocked: { resource: 'rate', ...resource }, ...(ready > 0 ? { ready_at_ms: ready } : {}) });
      }
    }
    return rows;
  }
}

/** Which queue head goes first: the higher priority, then the lower fair-queuing tag, the fewer running, the earlier. */
function before(a: { priority: number; tag: number; usage: number; seq: number }, b: typeof a): boolean {
  if (a.priority !== b.priority) return a.priority > b.priority;
  if (a.tag !== b.tag) return a.tag < b.tag;
  if (a.usage !== b.usage) return a.usage < b.usage;
  return a.seq < b.seq;
}

/** Rate-limit entries kept before those in the past are dropped (each prune is O(entries)). */
const MAX_RATE_ENTRIES_BEFORE_PRUNE = 1_000;

/** A queue's own counter: its deepest level (`scope` for no limit key, else `scope/limitKey`). */
function ownCounter(scope: string, limitKey: string): string {
  return limitKey === '' ? scope : `${scope}/${limitKey}`;
}

/** A queue's key among the fair-queuing tags (a scope alone is the scope's virtual time). */
function tagOf(scope: string, limitKey: string): string {
  return `${scope}:${limitKey}`;
}
