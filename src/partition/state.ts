import { LRUCache } from 'lru-cache';
import { assert } from '../common/assert.js';
import type { StateWrite } from '../storage/store.js';
import { dedupTable } from '../storage/tables/dedup.js';
import { expiryTable } from '../storage/tables/expiry.js';
import { FlowControl } from './flow-control.js';
import { emptyCounters, fsmTable, type Counters } from '../storage/tables/fsm.js';
import { inboxTable, type InboxEntry } from '../storage/tables/inbox.js';
import { invocationsTable, type InvocationStatus, type Status } from '../storage/tables/invocations.js';
import { journalTable, type JournalEntry } from '../storage/tables/journal.js';
import { liveTable } from '../storage/tables/live.js';
import { locksTable } from '../storage/tables/locks.js';
import { outboxTable, type OutboxEntry } from '../storage/tables/outbox.js';
import { promisesTable, type PromiseState } from '../storage/tables/promises.js';
import { restartTable } from '../storage/tables/restart.js';
import { stateTable } from '../storage/tables/state.js';
import { stateKeysTable } from '../storage/tables/state-keys.js';
import { positionName, subscriptionPositionsTable, type SubscriptionPosition } from '../storage/tables/subscription-positions.js';
import { schedulesTable, type ScheduleRecord } from '../storage/tables/schedules.js';
import { timersTable, type Timer } from '../storage/tables/timers.js';
import { ema, vqueueMetaTable, type VqueueAverage, type VqueueMeta } from '../storage/tables/vqueue-meta.js';
import { ownCopy } from '../common/bytes.js';
import { StateTtls } from './state-ttl.js';

export type { BlockedOn, InvocationResult, InvocationStatus, LastFailure, Status } from '../storage/tables/invocations.js';
export type { JournalEntry } from '../storage/tables/journal.js';
export type { OutboxEntry } from '../storage/tables/outbox.js';
export type { PromiseState } from '../storage/tables/promises.js';
export type { SubscriptionPosition } from '../storage/tables/subscription-positions.js';
export { positionName } from '../storage/tables/subscription-positions.js';
export type { Timer } from '../storage/tables/timers.js';
export { objectKeyOf, splitObjectKey } from '../storage/keys.js';
export { promiseKeyOf } from '../storage/tables/promises.js';

/** What a fold asks for once its batch is durable. */
export type Action =
  | { kind: 'start'; id: string; epoch: number }
  | { kind: 'forward'; id: string; epoch: number; type: number; payload: Uint8Array }
  | { kind: 'timer'; timer: Timer }
  | { kind: 'retry'; id: string; epoch: number; at_ms: number }
  | { kind: 'completed'; id: string }
  | { kind: 'outbox'; entry: OutboxEntry }
  | { kind: 'abort'; id: string }
  /** The current attempt broke a rule (RT0017...): end it and record the failure under `epoch`. */
  | { kind: 'reject'; id: string; epoch: number; error_code: string; message: string; entry_index: number; entry_type: number };

/**
 * Statuses of invocations that do not run (completed, sleeping, waiting for a lock, paused) kept
 * in memory; the others are read back from the store when a command reaches them. Those that run
 * or back off stay in memory: the invoker works from them, and there are at most
 * MAX_LIVE_INVOCATIONS_PER_PARTITION of them. At 10,000 per partition the cache held ~120 MB
 * under a noop load (a completed status was then a hash table of ~1.7 KB: `complete` deleted a
 * field; one that ran once is now a plain object of ~200 bytes, one retried, resumed or attached to
 * still passed through a delete), all promoted to the old generation and dying
 * there, and the server's RSS after a minute of load was ~200 MB over what 500 gave, for no
 * measured gain in CPU per call. What is read again soon (a wake-up, an attach just after the end) is in it.
 */
export const IDLE_STATUSES_IN_MEMORY = 1_000;
/** Object locks whose holder (or absence) is kept in memory; others cost one store read. */
export const LOCKS_IN_MEMORY = 10_000;
/** Bytes of object state a partition keeps in memory when none is given (the server gives worker.storage_db.state_cache_size / partitions). */
export const DEFAULT_STATE_CACHE_BYTES = 32 * 1024 * 1024;
/** What a cached state entry costs beyond its key and value bytes (Map slot, Buffer and its own ArrayBuffer). */
const STATE_ENTRY_OVERHEAD_BYTES = 256;

/**
 * The state of one partition, in memory, written through to the store. Folds change it only
 * through these methods, which record every store write of the current batch; the tables in
 * `storage/tables` own the keys.
 */
export class PartitionState {
  /**
   * Statuses in memory: every invocation that runs or backs off, and the most recently used
   * others (IDLE_STATUSES_IN_MEMORY); the store holds them all.
   */
  readonly invocations = new Map<string, InvocationStatus>();
  /** The status each id of `invocations` has as this batch leaves the store (a fold changes the object in place). */
  private readonly kinds = new Map<string, Status>();
  /** Ids of `invocations` that neither run nor back off, least recently used first: what may leave memory. */
  private readonly idle = new Set<string>();
  /** Invocations that have not completed (the sum of `counters.statuses`). */
  private live = 0;
  /** Reads a key of the store synchronously (the fold may not wait); set when there is a store. */
  loader: ((key: string) => Buffer | undefined) | undefined;
  /**
   * Journals in memory: of invocations that run or back off (bounded with them by the live
   * limit, MAX_LIVE_INVOCATIONS_PER_PARTITION) and of idle statuses in memory (they leave with
   * them); a journal leaves when its invocation suspends, pauses or completes.
   */
  readonly journals = new Map<string, JournalEntry[]>();
  /** Virtual object / workflow key (`svc/key`) → the invocation holding its lock, or '' for none: the most recently used keys. */
  private readonly locks: LRUCache<string, string>;
  /**
   * Key → invocations waiting for the lock, in arrival order, with their inbox sequence. Each
   * entry is a live invocation: bounded by the live limit (MAX_LIVE_INVOCATIONS_PER_PARTITION).
   */
  readonly inboxes = new Map<string, InboxEntry[]>();
  /**
   * Object key → its whole state (state key as base64url → value), for the most recently used
   * objects, bounded in bytes; the store holds every object (`statekeys` lists an object's keys).
   */
  private readonly stateCache: LRUCache<string, Map<string, Buffer>>;
  /** Source partition → last outbox sequence applied from it (one per partition: bounded by worker.partitions). */
  readonly dedup = new Map<number, number>();
  counters: Counters = emptyCounters();
  /** The counters changed in this batch: encoded once, when the batch is taken. */
  private countersChanged = false;
  /** Flow control: the rule book, the slots held per scope and limit key, the queues of those waiting for one. */
  readonly flow: FlowControl;
  /** State TTLs: the partition's book and when each object's state was last written or accessed. */
  readonly ttl: StateTtls;
  /** Where each (subscription, topic, Kafka partition) consumed here stands (see `positionName`; bounded by the subscriptions registered). */
  readonly subscriptionPositions = new Map<string, SubscriptionPosition>();
  /** Journal entries appended since this state was loaded (for metrics; not part of the state). */
  entries_appended = 0;
  private writes = new Map<string, Buffer | null>();
  /**
   * Statuses put in this batch, by key: encoded once, when the batch is taken. An invocation's
   * status changes two to five times in one batch (3 puts per noop call, 5 per object call, a
   * third and over half of them in the batch of an earlier put), and each JSON encoding costs
   * more than the rest of the put.
   */
  private statusWrites = new Map<string, InvocationStatus>();
  /**
   * The writes of the batch being written. Until it is durable the store still holds what it
   * replaces, so a status read through to the store (a request between the fold and the write)
   * must see these first, or it would cache what the batch deleted or changed.
   */
  private unflushed = new Map<string, Buffer | null>();

  /** Idle statuses kept in memory (IDLE_STATUSES_IN_MEMORY unless a test asks for fewer). */
  private readonly idle_statuses_limit: number;

  constructor(
    readonly partition: number,
    state_cache_bytes = DEFAULT_STATE_CACHE_BYTES,
    limits: { idle_statuses?: number; locks?: number } = {},
  ) {
    assert(state_cache_bytes > 0, () => `a state cache of ${state_cache_bytes} bytes`);
    this.stateCache = new LRUCache({ maxSize: state_cache_bytes, sizeCalculation: stateBytes });
    this.idle_statuses_limit = limits.idle_statuses ?? IDLE_STATUSES_IN_MEMORY;
    this.locks = new LRUCache<string, string>({ max: limits.locks ?? LOCKS_IN_MEMORY });
    this.ttl = new StateTtls({ partition, read: (key) => this.read(key), write: (key, value) => this.writes.set(key, value) });
    this.flow = new FlowControl({
      partition,
      write: (key, value) => this.writes.set(key, value),
      counters: () => this.counters,
      countersChanged: () => this.putCounters(),
      nextSeq: () => {
        this.putCounters();
        return ++this.counters.inbox_seq;
      },
    });
    assert(this.idle_statuses_limit >= 0, () => `${this.idle_statuses_limit} idle statuses in memory`);
  }

  /** Objects whose state is in memory now, and its bytes (bounded by the cache size). */
  stateCacheUse(): { objects: number; bytes: number } {
    return { objects: this.stateCache.size, bytes: this.stateCache.calculatedSize };
  }

  /** A key as this batch leaves the store: its writes, the batch in flight, then the store. */
  private read(key: string): Buffer | undefined {
    const put = this.statusWrites.get(key);
    if (put !== undefined) return invocationsTable.encode(put);
    const raw = this.writes.has(key) ? this.writes.get(key) : this.unflushed.has(key) ? this.unflushed.get(key) : this.loader?.(key);
    return raw ?? undefined;
  }

  /** Invocations that have not completed (what the limit on live invocations counts). */
  liveInvocations(): number {
    return this.live;
  }

  /** The counters as loaded from the store: the live count is their sum. */
  setCounters(c: Counters): void {
    this.counters = c;
    this.live = 0;
    for (const [status, n] of Object.entries(c.statuses)) {
      assert(status !== 'completed' && Number.isInteger(n) && n > 0, () => `partition ${this.partition}: ${n} invocations counted as ${status}`);
      this.live += n;
    }
  }

  /** Invocations of `subscription_id` here that have not completed. */
  subscriptionPending(subscription_id: string): number {
    return this.counters.subscriptions[subscription_id] ?? 0;
  }

  /** Whether `counts` are this partition's pending counts by subscription (no copy made). */
  subscriptionCountsEqual(counts: Readonly<Record<string, number>> | undefined): boolean {
    if (counts === undefined) return false;
    const mine = this.counters.subscriptions;
    let n = 0;
    for (const id in mine) {
      if (counts[id] !== mine[id]) return false;
      n++;
    }
    for (const _ in counts) n--;
    return n === 0;
  }

  /** Invocations here that have not completed, by the subscription that made them (a copy). */
  subscriptionCounts(): Record<string, number> {
    return { ...this.counters.subscriptions };
  }

  /**
   * The status of `id`, from memory or else from the store. Both give the same content, so the
   * fold does not depend on what happens to be cached.
   */
  status(id: string): InvocationStatus | undefined {
    const cached = this.invocations.get(id);
    if (cached !== undefined) {
      // One that runs is never in the idle set (cache()): the fold asks for it at every entry.
      if (cached.status !== 'running' && cached.status !== 'backing-off') this.touch(id);
      return cached;
    }
    const s = this.storedStatus(id);
    if (s !== undefined) this.cache(s);
    return s;
  }

  /** The status stored under `id` as this batch leaves the store, not kept in memory. */
  private storedStatus(id: string): InvocationStatus | undefined {
    const raw = this.read(invocationsTable.key(this.partition, id));
    if (raw === undefined) return undefined;
    const s = invocationsTable.decode(raw);
    assert(s.id === id, () => `partition ${this.partition}: status stored under ${id} is for ${s.id}`);
    return s;
  }

  /** The status of `id` as `status` gives it, without keeping it in memory (for scans by the admin API). */
  peekStatus(id: string): InvocationStatus | undefined {
    return this.invocations.get(id) ?? this.storedStatus(id);
  }

  /** A new invocation: nothing is stored under its id (the fold looked, or the id is random). */
  createStatus(s: InvocationStatus): void {
    assert(!this.kinds.has(s.id), () => `partition ${this.partition}: ${s.id} created twice`);
    this.writeStatus(s, undefined);
  }

  putStatus(s: InvocationStatus): void {
    this.writeStatus(s, this.storedKind(s.id));
  }

  private writeStatus(s: InvocationStatus, before: Status | undefined): void {
    assert(s.journal_length === (this.journals.get(s.id)?.length ?? s.journal_length), () => `journal of ${s.id} has ${this.journals.get(s.id)?.length} entries in memory, its status says ${s.journal_length}`);
    this.statusWrites.set(invocationsTable.key(this.partition, s.id), s);
    this.count(s, before, s.status);
    this.cache(s);
    // Its journal is read again when a command reaches it: a sleeping invocation costs no memory.
    if (s.status === 'suspended' || s.status === 'paused') this.journals.delete(s.id);
  }

  /** What the store holds for `id` as this batch leaves it (from memory when the status is there). */
  private storedKind(id: string): Status | undefined {
    return this.kinds.get(id) ?? this.storedStatus(id)?.status;
  }

  /** Keeps the counts and the `live` and `restart` indexes in step with a status going from `before` to `after`. */
  private count(s: InvocationStatus, before: Status | undefined, after: Status | undefined): void {
    if (before === after) return;
    const statuses = this.counters.statuses;
    if (before !== undefined && before !== 'completed') statuses[before] = (statuses[before] ?? 0) - 1;
    if (after !== undefined && after !== 'completed') statuses[after] = (statuses[after] ?? 0) + 1;
    const wasLive = before !== undefined && before !== 'completed';
    const isLive = after !== undefined && after !== 'completed';
    if (wasLive !== isLive) {
      this.live += isLive ? 1 : -1;
      this.writes.set(liveTable.key(this.partition, s.id), isLive ? liveTable.value : null);
      if (s.invoked_by_subscription_id) this.countSubscription(s.invoked_by_subscription_id, isLive ? 1 : -1);
    }
    const restarts = (k: Status | undefined) => k === 'running' || k === 'backing-off';
    if (restarts(before) !== restarts(after)) {
      this.writes.set(restartTable.key(this.partition, s.id), restarts(after) ? restartTable.value : null);
      // What runs or backs off holds a flow-control slot; what suspends, pauses or ends frees it.
      if (s.scope !== undefined) this.flow.hold(s.scope, s.limit_key ?? '', restarts(after) ? 1 : -1);
    }
    if (before !== undefined && before !== 'completed') assert(statuses[before]! >= 0, () => `partition ${this.partition}: ${statuses[before]} invocations counted as ${before}`);
    if (s.scope !== undefined) this.countQueue(s, before, after);
    this.countersChanged = true;
  }

  /** A flow-control queue's meta as this partition has it now (table vqm). */
  queueMeta(scope: string, limitKey: string): VqueueMeta | undefined {
    const raw = this.read(vqueueMetaTable.key(this.partition, scope, limitKey));
    return raw === undefined ? undefined : vqueueMetaTable.decode(raw);
  }

  /**
   * A scoped invocation's status changed: its flow-control queue's meta (table vqm) follows. Counts
   * never go below 0: invocations of a store from before the table (format 5 without it) were not
   * counted when they suspended or paused.
   */
  private countQueue(s: InvocationStatus, before: Status | undefined, after: Status | undefined): void {
    const key = vqueueMetaTable.key(this.partition, s.scope!, s.limit_key ?? '');
    const raw = this.read(key);
    const m: VqueueMeta = raw !== undefined ? vqueueMetaTable.decode(raw) : { created_at_ms: s.created_at_ms, suspended: 0, paused: 0, finished: 0 };
    const step = (field: 'suspended' | 'paused' | 'finished', status: Status): void => {
      if (before === status) m[field] = Math.max(0, m[field] - 1);
      if (after === status) m[field] += 1;
    };
    step('suspended', 'suspended');
    step('paused', 'paused');
    step('finished', 'completed');
    if (after === 'running') {
      m.last_attempt_at_ms = s.modified_at_ms;
      // (a resumption may leave the inbox too: only a first attempt is a start)
      if ((before === undefined || before === 'scheduled' || before === 'inboxed') && (s.starts ?? 1) === 1) m.last_start_at_ms = s.modified_at_ms;
    }
    if (after === 'completed') m.last_finish_at_ms = s.completed_at_ms ?? s.modified_at_ms;
    averageStages(m, s, before, after);
    this.writes.set(key, vqueueMetaTable.encode(m));
  }

  private countSubscription(subscription_id: string, delta: 1 | -1): void {
    const n = (this.counters.subscriptions[subscription_id] ?? 0) + delta;
    assert(n >= 0, () => `subscription ${subscription_id} has ${n} pending invocations`);
    if (n === 0) delete this.counters.subscriptions[subscription_id];
    else this.counters.subscriptions[subscription_id] = n;
  }

  /** Puts a status in memory; one that does not run may leave it again, least recently used first. */
  private cache(s: InvocationStatus): void {
    this.invocations.set(s.id, s);
    this.kinds.set(s.id, s.status);
    this.idle.delete(s.id);
    if (s.status === 'running' || s.status === 'backing-off') return;
    this.idle.add(s.id);
    while (this.idle.size > this.idle_statuses_limit) {
      const oldest = this.idle.values().next().value as string;
      this.idle.delete(oldest);
      this.invocations.delete(oldest);
      this.kinds.delete(oldest);
      this.journals.delete(oldest);
    }
  }

  private touch(id: string): void {
    if (!this.idle.delete(id)) return;
    this.idle.add(id);
  }

  appendEntry(s: InvocationStatus, entry: JournalEntry): number {
    let journal = this.journals.get(s.id) ?? this.loadJournal(s);
    if (journal === undefined) {
      journal = [];
      this.journals.set(s.id, journal);
    }
    const index = journal.length;
    assert(index === s.journal_length, () => `journal of ${s.id} has ${index} entries in memory, its status says ${s.journal_length}`);
    journal.push(entry);
    s.journal_length = index + 1;
    this.entries_appended += 1;
    this.writes.set(journalTable.key(this.partition, s.id, index), journalTable.encode(entry));
    return index;
  }

  /** The journal of an invocation that has not completed (empty when there is none). */
  journal(id: string): readonly JournalEntry[] {
    const journal = this.journals.get(id);
    if (journal !== undefined) return journal;
    const s = this.status(id);
    return (s !== undefined && this.loadJournal(s)) || [];
  }

  /**
   * Reads the journal of a live invocation from the store on its first use after the partition
   * loaded: a restart reads no journal up front (500 sleeping invocations cost ~1,500 reads
   * before the server could answer), only those of the invocations that run again. Checked
   * against the status here instead: one more entry than it says is as broken as one fewer.
   */
  private loadJournal(s: InvocationStatus): JournalEntry[] | undefined {
    if (s.status === 'completed' || s.journal_length === 0 || this.loader === undefined) return undefined;
    // Through this batch and the one in flight: a journal left memory (its invocation suspended) before they were written.
    const journal = journalTable.readSync((key) => this.read(key), this.partition, s.id, s.journal_length + 1);
    assert(journal.length === s.journal_length, () => `partition ${this.partition}: journal of ${s.id} has ${journal.length} entries, its status says ${s.journal_length}`);
    this.journals.set(s.id, journal);
    return journal;
  }

  deleteStatus(s: InvocationStatus): void {
    this.count(s, this.storedKind(s.id), undefined);
    this.invocations.delete(s.id);
    this.kinds.delete(s.id);
    this.idle.delete(s.id);
    const key = invocationsTable.key(this.partition, s.id);
    this.statusWrites.delete(key);
    this.writes.set(key, null);
  }

  deleteJournal(s: InvocationStatus): void {
    for (let i = 0; i < s.journal_length; i++) this.writes.set(journalTable.key(this.partition, s.id, i), null);
    this.journals.delete(s.id);
  }

  /**
   * Indexes when a completed invocation's retention ends: its journal (when the journal
   * retention is shorter) and then all of it. Called once, at completion.
   */
  indexExpiry(s: InvocationStatus): void {
    assert(s.status === 'completed' && s.completed_at_ms !== undefined, () => `expiry of ${s.id}, which has not completed`);
    const all = s.completed_at_ms + s.completion_retention_ms;
    this.writes.set(expiryTable.key(this.partition, all, s.id), expiryTable.encode('all'));
    const journal = s.completed_at_ms + s.journal_retention_ms;
    if (journal < all) this.writes.set(expiryTable.key(this.partition, journal, s.id), expiryTable.encode('journal'));
  }

  /** Removes the expiry entries of a completed invocation (`journal`: only the journal's). */
  unindexExpiry(s: InvocationStatus, scope: 'journal' | 'all'): void {
    if (s.completed_at_ms === undefined) return;
    const journal = s.completed_at_ms + s.journal_retention_ms;
    const all = s.completed_at_ms + s.completion_retention_ms;
    if (journal < all) this.writes.set(expiryTable.key(this.partition, journal, s.id), null);
    if (scope === 'all') this.writes.set(expiryTable.key(this.partition, all, s.id), null);
  }

  /** The journal leaves memory when the invocation completes; the store keeps it. */
  forgetJournal(id: string): void {
    this.journals.delete(id);
  }

  /** The invocation holding the lock of an object or workflow key (one store read when not in memory). */
  lockOf(objectKey: string): string | undefined {
    let holder = this.locks.get(objectKey);
    if (holder === undefined) {
      const raw = this.read(locksTable.key(this.partition, objectKey));
      holder = raw === undefined ? '' : locksTable.decode(raw).id;
      this.locks.set(objectKey, holder);
    }
    return holder === '' ? undefined : holder;
  }

  /** Takes the lock for `id` at `at_ms` (the log's time), or releases it (`id` undefined). */
  setLock(objectKey: string, id: string | undefined, at_ms?: number): void {
    const key = locksTable.key(this.partition, objectKey);
    if (id === undefined) {
      this.locks.set(objectKey, '');
      this.writes.set(key, null);
    } else {
      assert(this.lockOf(objectKey) === undefined, () => `lock of ${objectKey} taken by ${id} while ${this.lockOf(objectKey)} holds it`);
      this.locks.set(objectKey, id);
      assert(at_ms !== undefined, () => `lock of ${objectKey} taken by ${id} at no time`);
      this.writes.set(key, locksTable.encode(id, at_ms));
    }
  }

  enqueueInbox(objectKey: string, id: string): void {
    const seq = ++this.counters.inbox_seq;
    this.putCounters();
    let q = this.inboxes.get(objectKey);
    if (q === undefined) {
      q = [];
      this.inboxes.set(objectKey, q);
    }
    q.push({ id, seq });
    this.writes.set(inboxTable.key(this.partition, objectKey, seq), inboxTable.encode(id));
  }

  /** Removes `id` from the key's inbox (it starts, or it was killed while waiting). */
  removeFromInbox(objectKey: string, id: string): void {
    const q = this.inboxes.get(objectKey);
    if (q === undefined) return;
    const i = q.findIndex((e) => e.id === id);
    if (i < 0) return;
    const [e] = q.splice(i, 1);
    if (q.length === 0) this.inboxes.delete(objectKey);
    this.writes.set(inboxTable.key(this.partition, objectKey, e!.seq), null);
  }

  /** The whole state of an object (read from the store when not cached; then cached). */
  stateOf(objectKey: string): ReadonlyMap<string, Buffer> {
    const cached = this.stateCache.get(objectKey);
    if (cached !== undefined) return cached;
    const m = new Map<string, Buffer>();
    for (const k of this.stateKeys(objectKey)) {
      const value = this.read(stateTable.key(this.partition, objectKey, k));
      assert(value !== undefined, () => `partition ${this.partition}: ${objectKey} lists state key ${k}, which is not stored`);
      m.set(k, value);
    }
    if (m.size > 0) this.stateCache.set(objectKey, m);
    return m;
  }

  /** An object's state keys (base64url), sorted. */
  stateKeys(objectKey: string): string[] {
    const cached = this.stateCache.get(objectKey);
    if (cached !== undefined) return [...cached.keys()].sort();
    const raw = this.read(stateKeysTable.key(this.partition, objectKey));
    return raw === undefined ? [] : stateKeysTable.decode(raw);
  }

  /** One state value: one store read when the object is not cached. */
  stateValue(objectKey: string, stateKey: string): Buffer | undefined {
    const cached = this.stateCache.get(objectKey);
    if (cached !== undefined) return cached.get(stateKey);
    return this.read(stateTable.key(this.partition, objectKey, stateKey));
  }

  setState(objectKey: string, stateKey: string, value: Buffer | null): void {
    const cached = this.stateCache.get(objectKey);
    const had = cached !== undefined ? cached.has(stateKey) : this.read(stateTable.key(this.partition, objectKey, stateKey)) !== undefined;
    // The index changes only with the set of keys, not with their values.
    if (value === null ? had : !had) {
      const keys = this.stateKeys(objectKey);
      const next = value === null ? keys.filter((k) => k !== stateKey) : [...keys, stateKey].sort();
      this.writes.set(stateKeysTable.key(this.partition, objectKey), next.length > 0 ? stateKeysTable.encode(next) : null);
    }
    // A copy of its own, for the cache and for reads of this batch (which may cache it).
    const own = value === null ? null : ownCopy(value);
    if (cached !== undefined) {
      if (own === null) cached.delete(stateKey);
      else cached.set(stateKey, own);
      // lru-cache sizes an entry only when a different value is set: delete, then set.
      this.stateCache.delete(objectKey);
      if (cached.size > 0) this.stateCache.set(objectKey, cached);
    }
    this.writes.set(stateTable.key(this.partition, objectKey, stateKey), own);
  }

  /** Clears every state key of an object: one index write, whatever the number of keys. */
  clearState(objectKey: string): void {
    const keys = this.stateKeys(objectKey);
    if (keys.length === 0) return;
    for (const k of keys) this.writes.set(stateTable.key(this.partition, objectKey, k), null);
    this.writes.set(stateKeysTable.key(this.partition, objectKey), null);
    this.stateCache.delete(objectKey);
  }

  /** A schedule of this partition, read from the store (a fresh copy: change it through `putSchedule`). */
  schedule(id: string): ScheduleRecord | undefined {
    const raw = this.read(schedulesTable.key(this.partition, id));
    return raw === undefined ? undefined : schedulesTable.decode(raw);
  }

  putSchedule(s: ScheduleRecord): void {
    this.writes.set(schedulesTable.key(this.partition, s.id), schedulesTable.encode(s));
  }

  deleteSchedule(id: string): void {
    this.writes.set(schedulesTable.key(this.partition, id), null);
  }

  /** A workflow promise, read from the store (a fresh copy: change it through `putPromise`). */
  promiseOf(key: string): PromiseState | undefined {
    const raw = this.read(promisesTable.key(this.partition, key));
    return raw === undefined ? undefined : promisesTable.decode(raw);
  }

  putPromise(key: string, p: PromiseState): void {
    this.writes.set(promisesTable.key(this.partition, key), promisesTable.encode(p));
  }

  /** Stores a command for another partition; the worker's Shuffle delivers it once the batch is durable. */
  addOutbox(target: string, command: Buffer): OutboxEntry {
    const entry = { seq: ++this.counters.outbox_seq, target, command };
    this.counters.outbox += 1;
    this.putCounters();
    this.writes.set(outboxTable.key(this.partition, entry.seq), outboxTable.encode(entry));
    return entry;
  }

  /** The entry was delivered (a repeat of the acknowledgement, after a resend, finds nothing). */
  deleteOutbox(seq: number): void {
    const key = outboxTable.key(this.partition, seq);
    if (!this.stored(key)) return;
    this.writes.set(key, null);
    this.counters.outbox -= 1;
    assert(this.counters.outbox >= 0, () => `partition ${this.partition}: ${this.counters.outbox} outbox entries stored`);
    this.putCounters();
  }

  setDedup(source: number, seq: number): void {
    assert(seq > (this.dedup.get(source) ?? 0), () => `outbox sequence from partition ${source} goes back to ${seq}`);
    this.dedup.set(source, seq);
    this.writes.set(dedupTable.key(this.partition, source), dedupTable.encode(seq));
  }

  subscriptionPosition(subscription_id: string, topic: string, kafka_partition: number): SubscriptionPosition | undefined {
    return this.subscriptionPositions.get(positionName(subscription_id, topic, kafka_partition));
  }

  putSubscriptionPosition(p: SubscriptionPosition): void {
    const before = this.subscriptionPosition(p.subscription_id, p.topic, p.kafka_partition);
    assert(before === undefined || p.next_offset >= before.next_offset, () => `position of ${p.subscription_id} ${p.topic}/${p.kafka_partition} goes back from ${before?.next_offset} to ${p.next_offset}`);
    this.subscriptionPositions.set(positionName(p.subscription_id, p.topic, p.kafka_partition), p);
    this.writes.set(subscriptionPositionsTable.key(this.partition, p), subscriptionPositionsTable.encode(p));
  }

  /** The flow-control wake-up timer pending (undefined: none). */
  setFlowWake(at_ms: number | undefined): void {
    if (at_ms === undefined) delete this.counters.flow_wake_ms;
    else this.counters.flow_wake_ms = at_ms;
    this.putCounters();
  }

  private putCounters(): void {
    this.countersChanged = true;
  }

  // Timers live in the store only (the worker's TimerWindow holds the next few in memory).
  putTimer(t: Timer): void {
    const key = timersTable.key(this.partition, t);
    if (this.stored(key)) return;
    this.writes.set(key, Buffer.alloc(0));
    this.counters.timers += 1;
    this.putCounters();
  }

  deleteTimer(t: Timer): boolean {
    const key = timersTable.key(this.partition, t);
    if (!this.stored(key)) return false;
    this.writes.set(key, null);
    this.counters.timers -= 1;
    assert(this.counters.timers >= 0, () => `partition ${this.partition}: ${this.counters.timers} timers stored`);
    this.putCounters();
    return true;
  }

  /** Whether `key` is in the store as this batch leaves it. */
  private stored(key: string): boolean {
    return this.read(key) !== undefined;
  }

  /** The writes of the current batch, to be written; reads see them until `writesDurable`. */
  takeWrites(): StateWrite[] {
    if (this.countersChanged) this.writes.set(fsmTable.key(this.partition), fsmTable.encode(this.counters));
    this.countersChanged = false;
    for (const [key, status] of this.statusWrites) this.writes.set(key, invocationsTable.encode(status));
    this.statusWrites = new Map();
    this.unflushed = this.writes;
    this.writes = new Map();
    return [...this.unflushed];
  }

  /** The batch taken last is in the store: reads may go to the store again. */
  writesDurable(): void {
    this.unflushed = new Map();
  }

  /** Drops the writes of the current batch (the batch is abandoned: the partition stops). */
  discardWrites(): void {
    this.countersChanged = false;
    this.writes = new Map();
    this.statusWrites = new Map();
    this.unflushed = new Map();
  }
}

/** Restate's stage of a flow-control entry for a status (a backing-off attempt keeps its slot: running). */
type Stage = 'inbox' | 'running' | 'suspended' | 'paused' | 'finished';
const STAGE_OF: Record<Status, Stage> = { scheduled: 'inbox', inboxed: 'inbox', running: 'running', 'backing-off': 'running', suspended: 'suspended', paused: 'paused', completed: 'finished' };
/** The stages whose time is averaged when an invocation leaves them (as Restate: not paused). */
const DWELL: Partial<Record<Stage, VqueueAverage>> = { inbox: 'inbox', running: 'run', suspended: 'suspension' };

/**
 * A scoped invocation moves from `before` to `after` (at its modified time): the averages of
 * its queue's meta take their samples as Restate's do — the time in the stage it leaves; on
 * entering running, what this attempt waited for (and, the first time, how long since it was
 * due); on finishing from running, how long since it was due. A new one enters the inbox when
 * it is created.
 */
function averageStages(m: VqueueMeta, s: InvocationStatus, before: Status | undefined, after: Status | undefined): void {
  if (after === undefined) return; // purged: it left the finished stage, which is not averaged
  const now = s.modified_at_ms;
  const from: Stage = before === undefined ? 'inbox' : STAGE_OF[before];
  const to = STAGE_OF[after];
  if (from === to) {
    // (absent on a status from before this was kept: counted from its creation)
    s.stage_since_ms ??= s.created_at_ms;
    return;
  }
  const avg = (m.avg_ms ??= {});
  const sample = (name: VqueueAverage, ms: number): void => void (avg[name] = ema(avg[name], Math.max(0, ms)));
  const dwell = DWELL[from];
  if (dwell !== undefined) sample(dwell, now - (s.stage_since_ms ?? s.created_at_ms));
  const due = s.runnable_at_ms ?? s.created_at_ms;
  if (to === 'running') {
    const waited = s.blocked_ms?.attempt === s.epoch ? s.blocked_ms.latest : {};
    sample('blocked_on_concurrency_rules', waited.concurrency_rules ?? 0);
    sample('blocked_on_lock', waited.lock ?? 0);
    if (s.starts === 1 && from === 'inbox') sample('queue', now - due);
  }
  if (to === 'finished' && from === 'running') sample('end_to_end', now - due);
  s.stage_since_ms = now;
}

function stateBytes(m: Map<string, Buffer>, objectKey: string): number {
  let bytes = objectKey.length + STATE_ENTRY_OVERHEAD_BYTES;
  for (const [k, v] of m) bytes += k.length + v.length + STATE_ENTRY_OVERHEAD_BYTES;
  return bytes;
}
