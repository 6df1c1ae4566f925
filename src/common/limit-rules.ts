// Flow control's vocabulary, shaped as Restate 1.7 shapes it: scopes and limit keys (restricted
// values), the rule book (patterns `scope[/l1[/l2]]`, each `*` or exact, with a concurrency
// limit, versions, enable/disable) and which rule governs a counter. Pure: the admin API, the
// ingress and the partition fold share it, and the fold must decide from the log alone.

/** A scope or a limit-key level: non-empty, at most this many bytes of [a-zA-Z0-9_.-]. */
export const MAX_RESTRICTED_VALUE_BYTES = 36;
/** Rules a book holds at most (Restate's MAX_RULES_PER_BOOK). */
export const MAX_RULES = 10_000;
/** Levels a limit key has at most (`tenant/user`). */
export const MAX_LIMIT_KEY_LEVELS = 2;

const ALLOWED = /^[a-zA-Z0-9_.-]*$/;

/** Why `v` is not a valid scope or limit-key level, in Restate's words; undefined when it is. */
export function restrictedValueError(v: string): string | undefined {
  if (v.length === 0) return 'value cannot be empty';
  const bytes = Buffer.byteLength(v, 'utf8');
  if (bytes > MAX_RESTRICTED_VALUE_BYTES) return `value too long: ${bytes} bytes (max ${MAX_RESTRICTED_VALUE_BYTES})`;
  if (!ALLOWED.test(v)) return 'value contains characters outside the allowed set [a-zA-Z0-9_.-]';
  return undefined;
}

/**
 * The levels of a limit key (`tenant1` or `tenant1/user42`; a trailing `/` is ignored, empty
 * means none), or why it is refused.
 */
export function parseLimitKey(text: string): string[] | { error: string } {
  const t = text.endsWith('/') ? text.slice(0, -1) : text;
  if (t.length === 0) return [];
  const levels = t.split('/');
  // Level by level, as Restate reads them: `a//b` is an empty level, `a/b/c` one too many.
  for (const [i, l] of levels.entries()) {
    if (i >= MAX_LIMIT_KEY_LEVELS) return { error: `too many path components in the given limit-key (max ${MAX_LIMIT_KEY_LEVELS})` };
    const e = restrictedValueError(l);
    if (e !== undefined) return { error: `invalid limit-key component: ${e}` };
  }
  return levels;
}

/** The components of a rule pattern (1 to 3, each `*` or a restricted value), or why it is refused. */
export function parsePattern(text: string): string[] | { error: string } {
  let t = text.trim();
  if (t.endsWith('/') && t.length > 1) t = t.slice(0, -1);
  if (t.length === 0) return { error: 'pattern cannot be empty' };
  const parts = t.split('/');
  if (parts.length > 3) return { error: 'too many path components (max 3)' };
  for (const p of parts) {
    if (p === '*') continue;
    const e = restrictedValueError(p);
    if (e !== undefined) return { error: `invalid component: ${e}` };
  }
  return parts;
}

export interface LimitRule {
  /** Canonical pattern: the rule's identity. */
  pattern: string;
  /** Invocations that may run at once per counter the rule governs; undefined = unlimited. */
  concurrency?: number;
  /** Keel's own: at most `starts` starts per `interval_ms` per counter, spaced evenly (no burst). */
  rate?: RateLimit;
  /** Keel's own: at most this many invocations waiting per counter; past it new ones are refused (429). */
  backlog?: number;
  description?: string;
  disabled: boolean;
  version: number;
  last_modified_ms: number;
}

/** Every rule, sorted by pattern, and the book's version (bumped by every change). */
export interface RateLimit {
  starts: number;
  interval_ms: number;
}

export interface RuleBook {
  version: number;
  rules: LimitRule[];
}

export const EMPTY_RULE_BOOK: RuleBook = { version: 0, rules: [] };

export type Precondition = { type: 'none' } | { type: 'matches'; version: number } | { type: 'does_not_exist' };

export interface UpsertRule {
  pattern: string;
  /**
   * `concurrency` as Restate reads it (absent: unlimited). Keel's own `rate` and `backlog`: absent
   * keeps the rule's (a client that does not know them — the restate CLI — does not erase them),
   * null removes.
   */
  limits?: { concurrency?: number; rate?: RateLimit | null; backlog?: number | null };
  description?: string | null;
  disabled?: boolean;
  precondition?: Precondition;
}

export interface DeleteRule {
  pattern: string;
  expected_version?: number;
}

/** A precondition that does not hold, in Restate's words (answered with 409). */
export class RulePreconditionFailed extends Error {}

function preconditionText(p: Precondition): string {
  return p.type === 'matches' ? `Matches(v${p.version})` : p.type === 'does_not_exist' ? 'DoesNotExist' : 'None';
}

function checkPrecondition(pattern: string, p: Precondition, current: LimitRule | undefined): void {
  const holds = p.type === 'none' || (p.type === 'does_not_exist' ? current === undefined : current?.version === p.version);
  if (holds) return;
  const actual = current === undefined ? 'None' : `Some(v${current.version})`;
  throw new RulePreconditionFailed(`rule precondition ${preconditionText(p)} for pattern ${pattern} failed (actual version: ${actual})`);
}

/**
 * Applies upserts to a book, all or none (a failed precondition throws RulePreconditionFailed):
 * a new rule takes the new book version; a change of limits or of disabled bumps the rule's
 * version; a description alone keeps it; an identical upsert changes nothing.
 * Patterns must already be canonical.
 */
export function upsertRules(book: RuleBook, reqs: readonly UpsertRule[], now_ms: number): { book: RuleBook; rules: LimitRule[] } {
  const byPattern = new Map(book.rules.map((r) => [r.pattern, r]));
  const version = book.version + 1;
  let changed = false;
  const out: LimitRule[] = [];
  for (const req of reqs) {
    const current = byPattern.get(req.pattern);
    checkPrecondition(req.pattern, req.precondition ?? { type: 'none' }, current);
    const next = nextRule(req, current, version, now_ms);
    if (next !== current) {
      changed = true;
      byPattern.set(req.pattern, next);
    }
    out.push(next);
  }
  if (!changed) return { book, rules: out };
  return { book: { version, rules: [...byPattern.values()].sort(byPatternOrder) }, rules: out };
}

function nextRule(req: UpsertRule, current: LimitRule | undefined, bookVersion: number, now_ms: number): LimitRule {
  const { concurrency } = req.limits ?? {};
  const rate = req.limits?.rate === undefined ? current?.rate : (req.limits.rate ?? undefined);
  const backlog = req.limits?.backlog === undefined ? current?.backlog : (req.limits.backlog ?? undefined);
  const disabled = req.disabled ?? false;
  const description = req.description ?? undefined;
  const base = {
    pattern: req.pattern,
    ...(concurrency !== undefined ? { concurrency } : {}),
    ...(rate !== undefined ? { rate: { starts: rate.starts, interval_ms: rate.interval_ms } } : {}),
    ...(backlog !== undefined ? { backlog } : {}),
    ...(description !== undefined ? { description } : {}),
    disabled,
  };
  if (current === undefined) return { ...base, version: bookVersion, last_modified_ms: now_ms };
  const sameRate = current.rate?.starts === rate?.starts && current.rate?.interval_ms === rate?.interval_ms;
  const limitsChanged = current.concurrency !== concurrency || !sameRate || current.backlog !== backlog || current.disabled !== disabled;
  if (limitsChanged) return { ...base, version: current.version + 1, last_modified_ms: now_ms };
  if (current.description !== description) return { ...base, version: current.version, last_modified_ms: current.last_modified_ms };
  return current;
}

/** Removes rules (a failed expected version throws); absent patterns without one are skipped. */
export function deleteRules(book: RuleBook, reqs: readonly DeleteRule[]): { book: RuleBook; removed: string[] } {
  const byPattern = new Map(book.rules.map((r) => [r.pattern, r]));
  const removed: string[] = [];
  for (const req of reqs) {
    const current = byPattern.get(req.pattern);
    if (req.expected_version !== undefined) checkPrecondition(req.pattern, { type: 'matches', version: req.expected_version }, current);
    if (current === undefined) continue;
    byPattern.delete(req.pattern);
    removed.push(req.pattern);
  }
  if (removed.length === 0) return { book, removed };
  return { book: { version: book.version + 1, rules: [...byPattern.values()].sort(byPatternOrder) }, removed };
}

function byPatternOrder(a: LimitRule, b: LimitRule): number {
  return a.pattern < b.pattern ? -1 : a.pattern > b.pattern ? 1 : 0;
}

/** The counter levels of an invocation: its scope, then each limit-key level under it. */
export type Level = 'Scope' | 'Level1' | 'Level2';
export const LEVELS: readonly Level[] = ['Scope', 'Level1', 'Level2'];

/** The counters an invocation takes: `scope`, `scope/l1`, `scope/l1/l2` (as deep as its limit key). */
export function counterKeys(scope: string, limitKey: string | undefined): string[] {
  const out = [scope];
  if (limitKey) {
    let k = scope;
    for (const l of limitKey.split('/')) out.push((k = `${k}/${l}`));
  }
  return out;
}

/**
 * Rule lookup for the fold: by canonical pattern, so finding the rule of a counter is at most
 * eight map reads, whatever the size of the book.
 */
export class RuleIndex {
  private readonly byPattern: Map<string, LimitRule>;
  private readonly rated: boolean;
  constructor(readonly book: RuleBook) {
    this.byPattern = new Map(book.rules.filter((r) => !r.disabled).map((r) => [r.pattern, r]));
    this.rated = [...this.byPattern.values()].some((r) => r.rate !== undefined);
  }

  /**
   * The rule governing a counter (`scope[/l1[/l2]]`): among the enabled rules of its depth that
   * match it, the best ranked (exact scope 4, exact L1 2, exact L2 1, a wildcard 0). A rule
   * without a concurrency governs too (unlimited), shadowing wildcards below it.
   */
  ruleOf(counterKey: string): LimitRule | undefined {
    if (this.byPattern.size === 0) return undefined;
    const parts = counterKey.split('/');
    const n = parts.length;
    // Masks from the most exact down: bit (n-1-i) set = component i exact.
    for (let mask = (1 << n) - 1; mask >= 0; mask--) {
      const pattern = parts.map((p, i) => ((mask >> (n - 1 - i)) & 1 ? p : '*')).join('/');
      const r = this.byPattern.get(pattern);
      if (r !== undefined) return r;
    }
    return undefined;
  }

  /** The limit of a counter, undefined when unlimited. */
  limitOf(counterKey: string): number | undefined {
    return this.ruleOf(counterKey)?.concurrency;
  }

  /** Whether any enabled rule has a rate limit (the fold skips rate bookkeeping otherwise). */
  get hasRates(): boolean {
    return this.rated;
  }
}

/** A flow-control queue's id (`vq_…`, as Restate's look): its scope and limit key, reversibly. */
export function vqueueId(scope: string, limitKey: string): string {
  return `vq_${Buffer.from(`${scope}:${limitKey}`, 'utf8').toString('base64url')}`;
}

/** The scope and limit key of a queue id, or undefined when it is not one. */
export function parseVqueueId(id: string): { scope: string; limit_key: string } | undefined {
  if (!/^vq_[A-Za-z0-9_-]{1,200}$/.test(id)) return undefined;
  const text = Buffer.from(id.slice(3), 'base64url').toString('utf8');
  const cut = text.indexOf(':');
  if (cut <= 0) return undefined;
  const scope = text.slice(0, cut);
  const limitKey = text.slice(cut + 1);
  if (restrictedValueError(scope) !== undefined) return undefined;
  const levels = parseLimitKey(limitKey);
  if (!Array.isArray(levels) || levels.join('/') !== limitKey) return undefined;
  return { scope, limit_key: limitKey };
}
