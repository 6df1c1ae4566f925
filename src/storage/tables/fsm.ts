// Table `fsm`: a partition's own counters (inbox and outbox sequences, what is stored), one JSON value.
import type { Db } from '../store.js';
import { statePrefix } from '../keys.js';

export interface Counters {
  inbox_seq: number;
  outbox_seq: number;
  /** Timers stored (format 3; the upgrade from 2 counts them). */
  timers: number;
  /** Outbox entries stored, not yet delivered (format 4). */
  outbox: number;
  /**
   * Invocations that have not completed, by status (format 4; the upgrade from 3 counts them):
   * their statuses stay on disk until used, and the limit on live invocations, the metrics and
   * the admin API count them here instead of in memory.
   */
  statuses: Record<string, number>;
  /** Subscription id → its invocations here that have not completed (format 4), for back-pressure. */
  subscriptions: Record<string, number>;
  /** Flow-control counter (`scope`, `scope/l1`, `scope/l1/l2`) → scoped invocations holding a slot: running or backing off. */
  usage: Record<string, number>;
  /**
   * Fair queuing between the flow-control queues of a scope: `scope:limitKey` → the queue's
   * virtual start tag, `scope` → the scope's virtual time (the tag last served). Only for queues
   * that hold waiters: bounded with them by the live limit.
   */
  tags: Record<string, number>;
  /**
   * Rate limits: counter → the earliest time (ms) its next start may be (the theoretical arrival
   * time of a GCRA without burst). Entries in the past are pruned as the record grows.
   */
  rate: Record<string, number>;
  /** Flow-control queues an operator paused: `scope:limitKey` → 1 (bounded by what operators pause). */
  paused: Record<string, number>;
  /** The time of the earliest flow-control wake-up timer pending (a rate-limited queue head), if any. */
  flow_wake_ms?: number;
}

/** A partition that has written nothing: what a rebuild from its first record starts from too. */
export const EMPTY_COUNTERS: Readonly<Counters> = { inbox_seq: 0, outbox_seq: 0, timers: 0, outbox: 0, statuses: {}, subscriptions: {}, usage: {}, tags: {}, rate: {}, paused: {} };

export function emptyCounters(): Counters {
  return { ...EMPTY_COUNTERS, statuses: {}, subscriptions: {}, usage: {}, tags: {}, rate: {}, paused: {} };
}

export const fsmTable = {
  key: (partition: number): string => `${statePrefix(partition)}counters`,
  /** Names sorted: the same counts encode the same bytes whatever order they were counted in (the rebuild check compares bytes). */
  encode: (c: Counters): Buffer => {
    const flow = {
      // Flow control's counters only when in use: a partition without scopes encodes as before them.
      ...(c.usage && Object.keys(c.usage).length > 0 ? { usage: sorted(c.usage) } : {}),
      ...(c.tags && Object.keys(c.tags).length > 0 ? { tags: sorted(c.tags, true) } : {}),
      ...(c.rate && Object.keys(c.rate).length > 0 ? { rate: sorted(c.rate, true) } : {}),
      ...(c.paused && Object.keys(c.paused).length > 0 ? { paused: sorted(c.paused) } : {}),
      ...(c.flow_wake_ms !== undefined ? { flow_wake_ms: c.flow_wake_ms } : {}),
    };
    return Buffer.from(JSON.stringify({ inbox_seq: c.inbox_seq, outbox_seq: c.outbox_seq, timers: c.timers, outbox: c.outbox, statuses: sorted(c.statuses), subscriptions: sorted(c.subscriptions), ...flow }));
  },

  async read(db: Db, partition: number): Promise<Counters> {
    const raw = await db.get(fsmTable.key(partition));
    return raw === undefined ? emptyCounters() : { ...emptyCounters(), ...(JSON.parse(raw.toString('utf8')) as Partial<Counters>) };
  },
};

function sorted(counts: Record<string, number>, keepZero = false): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of Object.keys(counts).sort()) if (keepZero || counts[k] !== 0) out[k] = counts[k]!;
  return out;
}
