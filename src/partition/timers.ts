// The durable timers of one partition: the timer table is ordered by due time on disk; memory
// holds only the next `limit` of them (Restate's num_timers_in_memory_limit) and one setTimeout
// for the earliest. When the window drains, the next chunk is read from the store.
import { assert } from '../common/assert.js';
import type { Logger } from '../common/logger.js';
import type { Db } from '../storage/store.js';
import { timersTable, type Timer } from '../storage/tables/timers.js';

/** setTimeout takes at most a signed 32-bit delay; a later timer is armed again at that bound. */
const MAX_TIMEOUT_MS = 2_147_483_647;
/** A timer whose firing was refused, or a failed read of the store, is tried again after this. */
const TIMER_RETRY_MS = 1_000;

interface Armed {
  key: string;
  timer: Timer;
}

export class TimerWindow {
  /** The earliest timers, sorted by key (= due time, then invocation): at most `limit`. */
  private window: Armed[] = [];
  /**
   * Keys up to this one are all in memory; later ones may be on disk only. Undefined: nothing
   * read yet. `complete`: every stored timer is in memory.
   */
  private loadedThrough: string | undefined;
  private complete = false;
  /** Timers that arrive while a refill reads the store: placed when it is done. */
  private arrivals: Armed[] | undefined;
  private handle: NodeJS.Timeout | undefined;
  private armedAt_ms: number | undefined;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly partition: number,
    private readonly limit: number,
    private readonly fire: (t: Timer) => Promise<void>,
    private readonly logger: Logger,
  ) {
    assert(limit >= 1, () => `a timer window of ${limit}`);
  }

  /** Timers held in memory now (bounded by `limit`). */
  get size(): number {
    return this.window.length;
  }

  /** Reads the first timers from the store and arms the earliest. Once only: after stop() a window stays stopped. */
  start(): void {
    this.refill();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.handle);
    this.window = [];
  }

  /** A timer the fold stored (its batch is durable): in memory if it falls in the window. */
  add(timer: Timer): void {
    if (this.stopped) return;
    const armed = { key: timersTable.key(this.partition, timer), timer };
    if (this.arrivals !== undefined) {
      this.arrivals.push(armed);
      return;
    }
    this.place(armed);
    this.arm();
  }

  private place(armed: Armed): void {
    // Past the window: on disk, and the refill after the window drains reads it.
    if (!this.complete && (this.loadedThrough === undefined || armed.key > this.loadedThrough)) return;
    const at = this.indexOf(armed.key);
    if (this.window[at]?.key === armed.key) return;
    this.window.splice(at, 0, armed);
    if (this.window.length > this.limit) {
      this.window.length = this.limit;
      this.loadedThrough = this.window[this.limit - 1]!.key;
      this.complete = false;
    }
  }

  /** Where `key` goes in the sorted window (binary search). */
  private indexOf(key: string): number {
    let [lo, hi] = [0, this.window.length];
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.window[mid]!.key < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private arm(): void {
    if (this.stopped) return;
    const first = this.window[0];
    if (first === undefined) {
      clearTimeout(this.handle);
      this.armedAt_ms = undefined;
      if (!this.complete) this.refill();
      return;
    }
    if (this.armedAt_ms === first.timer.wake_up_ms) return;
    clearTimeout(this.handle);
    this.armedAt_ms = first.timer.wake_up_ms;
    const delay_ms = Math.max(0, Math.min(first.timer.wake_up_ms - Date.now(), MAX_TIMEOUT_MS));
    this.handle = setTimeout(() => this.fireDue(), delay_ms);
  }

  private fireDue(): void {
    this.armedAt_ms = undefined;
    const now_ms = Date.now();
    let due = 0;
    while (due < this.window.length && this.window[due]!.timer.wake_up_ms <= now_ms) due++;
    // At most `limit`: the splice is bounded by the window, not by the timers stored.
    for (const armed of this.window.splice(0, due)) this.fireOne(armed);
    this.arm();
  }

  /**
   * Appends the timer's firing. A timer fired twice (after a restart) or deleted meanwhile is
   * ignored by the fold. Refused (a full partition queue), it goes back into the window a second
   * later: it is at or below `loadedThrough`, so no refill would read it again.
   */
  private fireOne(armed: Armed): void {
    const retry = (err: unknown): void => {
      if (this.stopped) return;
      this.logger.warn({ err, code: (err as { code?: string })?.code ?? 'RT0006', partition: this.partition }, 'a timer could not fire; trying again in 1 s');
      setTimeout(() => this.add(armed.timer), TIMER_RETRY_MS).unref();
    };
    try {
      this.fire(armed.timer).catch(retry);
    } catch (err) {
      retry(err);
    }
  }

  /** Reads the next `limit` timers after the window from the store; arrivals meanwhile wait. */
  private refill(): void {
    if (this.arrivals !== undefined || this.stopped) return;
    assert(this.window.length === 0, () => `partition ${this.partition}: refill with ${this.window.length} timers in memory`);
    this.arrivals = [];
    timersTable
      .after(this.db, this.partition, this.loadedThrough, this.limit)
      .then((read) => {
        const arrivals = this.arrivals ?? [];
        this.arrivals = undefined;
        if (this.stopped) return;
        this.window = read.map(([key, timer]) => ({ key, timer }));
        this.complete = read.length < this.limit;
        if (read.length > 0) this.loadedThrough = read[read.length - 1]![0];
        for (const a of arrivals) this.place(a);
        this.arm();
      })
      .catch((err) => {
        const arrivals = this.arrivals ?? [];
        this.arrivals = undefined;
        if (this.stopped) return;
        this.logger.error({ err, code: 'RT0006', partition: this.partition }, 'cannot read timers from the store; trying again in 1 s');
        // The window is empty and incomplete: arrivals at or below loadedThrough are kept, the rest
        // wait in the store for the next refill.
        for (const a of arrivals) this.place(a);
        if (this.window.length > 0) this.arm();
        else setTimeout(() => (this.window.length === 0 ? this.refill() : this.arm()), TIMER_RETRY_MS).unref();
      });
  }
}
