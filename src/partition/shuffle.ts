import { assert } from '../common/assert.js';
import type { Logger } from '../common/logger.js';
import type { OutboxEntry } from './state.js';

/** Outbox entries of one partition sent and not yet acknowledged: what the shuffle holds in memory. */
export const OUTBOX_IN_FLIGHT_LIMIT = 256;
/** Stored entries read per step while the shuffle catches up with a backlog. */
const READ_CHUNK = 128;
/** A refused delivery is tried again after this, doubling up to the cap. */
const RETRY_INITIAL_MS = 100;
const RETRY_MAX_MS = 10_000;

export interface ShuffleHost {
  /** Up to `limit` stored outbox entries of the partition with a sequence from `from_seq` on, in order. */
  read(from_seq: number, limit: number): Promise<OutboxEntry[]>;
  /**
   * Sends one entry to its target partition: the refusal when the target will not take it now,
   * else a promise that settles once the target has it and the source has recorded the delivery.
   */
  send(entry: OutboxEntry): Error | Promise<void>;
}

/**
 * Delivers one partition's outbox to the other partitions, in sequence order (Restate's shuffle).
 * The store holds the outbox; the shuffle holds at most OUTBOX_IN_FLIGHT_LIMIT entries. While it
 * keeps up (`live`) it sends each entry as the fold announces it, without reading it back; once it
 * falls behind (a backlog at open, the in-flight bound reached, a refusal) it reads the store from
 * the first entry not sent, in chunks, until a read comes back short with nothing announced beyond.
 *
 * Order is what makes delivery exactly-once: a target drops any entry at or below the last
 * sequence it applied from this partition, so an entry overtaken by a later one would be lost.
 * A refusal therefore stops all sending at once (it is synchronous), and the retry rewinds to the
 * refused entry: entries after it that did arrive are sent again and dropped by their targets.
 */
export class Shuffle {
  private mode: 'reading' | 'live' = 'reading';
  /** The next sequence to send: every stored entry below it has been sent. */
  private next_seq = 1;
  /** The highest sequence the fold announced (stored, durable). */
  private announced_seq = 0;
  private in_flight = 0;
  private reading = false;
  private stopped = false;
  /** Set while a refused entry waits for its retry: sending resumes from `from_seq`. */
  private retry: { from_seq: number; timer: NodeJS.Timeout } | undefined;
  private retry_ms = RETRY_INITIAL_MS;

  constructor(
    private readonly partition: number,
    private readonly host: ShuffleHost,
    private readonly logger: Logger,
  ) {}

  /** Entries sent and not yet acknowledged. */
  get inFlight(): number {
    return this.in_flight;
  }

  /** Starts delivering what the store holds (a backlog from before a restart). */
  start(): void {
    this.pump();
  }

  stop(): void {
    this.stopped = true;
    if (this.retry !== undefined) clearTimeout(this.retry.timer);
  }

  /** The fold stored `entry` and its batch is durable. */
  announce(entry: OutboxEntry): void {
    assert(entry.seq > this.announced_seq, () => `partition ${this.partition}: outbox entry ${entry.seq} announced after ${this.announced_seq}`);
    this.announced_seq = entry.seq;
    if (this.mode !== 'live' || this.retry !== undefined || this.stopped) return;
    if (entry.seq !== this.next_seq || this.in_flight >= OUTBOX_IN_FLIGHT_LIMIT) {
      this.mode = 'reading';
      this.pump();
      return;
    }
    this.dispatch(entry);
  }

  /** Sends `entry`; false when it was refused (sending stops until the retry). */
  private dispatch(entry: OutboxEntry): boolean {
    const sent = this.host.send(entry);
    if (sent instanceof Error) {
      this.refused(entry.seq, sent);
      return false;
    }
    this.next_seq = entry.seq + 1;
    this.in_flight += 1;
    sent.then(
      () => {
        this.settled();
        this.retry_ms = RETRY_INITIAL_MS;
        if (this.mode === 'reading') this.pump();
      },
      (err: unknown) => {
        this.settled();
        this.refused(entry.seq, err as Error);
      },
    );
    return true;
  }

  private settled(): void {
    this.in_flight -= 1;
    assert(this.in_flight >= 0, () => `partition ${this.partition}: ${this.in_flight} outbox entries in flight`);
  }

  private refused(seq: number, err: Error): void {
    if (this.stopped) return;
    if (this.retry !== undefined) {
      this.retry.from_seq = Math.min(this.retry.from_seq, seq);
      return;
    }
    const code = (err as { code?: unknown }).code;
    this.logger.warn({ err, code: typeof code === 'string' ? code : 'KEEL0501', seq, partition: this.partition, retry_in_ms: this.retry_ms }, 'outbox delivery refused; retrying in order');
    const timer = setTimeout(() => {
      const from = this.retry!.from_seq;
      this.retry = undefined;
      this.next_seq = Math.min(this.next_seq, from);
      this.mode = 'reading';
      this.pump();
    }, this.retry_ms);
    this.retry = { from_seq: seq, timer };
    this.retry_ms = Math.min(this.retry_ms * 2, RETRY_MAX_MS);
  }

  private pump(): void {
    if (this.reading || this.stopped || this.retry !== undefined || this.mode === 'live') return;
    this.reading = true;
    this.readMore()
      .catch((err: unknown) => this.refused(this.next_seq, err as Error))
      .finally(() => (this.reading = false));
  }

  private async readMore(): Promise<void> {
    while (!this.stopped && this.retry === undefined && this.mode === 'reading' && this.in_flight < OUTBOX_IN_FLIGHT_LIMIT) {
      const limit = Math.min(READ_CHUNK, OUTBOX_IN_FLIGHT_LIMIT - this.in_flight);
      const entries = await this.host.read(this.next_seq, limit);
      for (const e of entries) {
        if (this.stopped || this.retry !== undefined) return;
        // Sent while this chunk was read (a rewind re-reads what it needs).
        if (e.seq < this.next_seq) continue;
        if (!this.dispatch(e)) return;
      }
      // Everything stored was sent and nothing newer was announced meanwhile: the fold's
      // announcements carry on from here.
      if (entries.length < limit && this.announced_seq < this.next_seq) this.mode = 'live';
    }
  }
}
