import { assert } from '../common/assert.js';
import { stateTtlTable, type StateTtl } from '../storage/tables/state-ttl.js';

/** What the state TTLs of a partition read and write through (the partition state's batch). */
export interface StateTtlStore {
  partition: number;
  read(key: string): Buffer | undefined;
  write(key: string, value: Buffer | null): void;
}

/**
 * State TTLs (Keel's own): the book the partition folds with, and when each object of a service
 * with a TTL was last written (or accessed). Times are the log's, so a rebuild keeps and expires
 * the same state. Bounded by the book (one entry per service with a TTL); the times are in the
 * store only.
 */
export class StateTtls {
  private book = new Map<string, StateTtl>();

  constructor(private readonly store: StateTtlStore) {}

  /** The book as it is (a copy, sorted by service): what the worker compares with the metadata's. */
  entries(): StateTtl[] {
    return [...this.book.values()].sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : 0));
  }

  of(service: string): StateTtl | undefined {
    return this.book.get(service);
  }

  setBook(entries: readonly StateTtl[], write: boolean): void {
    for (const e of entries) assert(e.ttl_ms > 0 && Number.isSafeInteger(e.ttl_ms), () => `state TTL of ${e.service}: ${e.ttl_ms} ms`);
    this.book = new Map(entries.map((e) => [e.service, { service: e.service, ttl_ms: e.ttl_ms, on_access: e.on_access, since_ms: e.since_ms }]));
    if (write) this.store.write(stateTtlTable.bookKey(this.store.partition), stateTtlTable.encodeBook(this.entries()));
  }

  /**
   * The state of `objectKey` (an object of `service`) was written, or accessed, at `now_ms`: its
   * TTL counts from then. Nothing for a service without a TTL, or an access where only writes count.
   */
  touch(service: string, objectKey: string, now_ms: number, how: 'write' | 'access'): void {
    const ttl = this.book.get(service);
    if (ttl === undefined || (how === 'access' && !ttl.on_access)) return;
    const before = this.touchedAt(objectKey);
    if (before === now_ms) return;
    if (before !== undefined) this.store.write(stateTtlTable.byTimeKey(this.store.partition, service, before, objectKey), null);
    this.store.write(stateTtlTable.touchedKey(this.store.partition, objectKey), stateTtlTable.encodeTouched(now_ms));
    this.store.write(stateTtlTable.byTimeKey(this.store.partition, service, now_ms, objectKey), Buffer.alloc(0));
  }

  touchedAt(objectKey: string): number | undefined {
    const raw = this.store.read(stateTtlTable.touchedKey(this.store.partition, objectKey));
    return raw === undefined ? undefined : stateTtlTable.decodeTouched(raw);
  }

  /**
   * When the state of `objectKey` expires (if its service has a TTL): its TTL after its last write
   * or access, or after the TTL was set when it was not touched since.
   */
  expiresAt(service: string, objectKey: string): number | undefined {
    const ttl = this.book.get(service);
    if (ttl === undefined) return undefined;
    return Math.max(this.touchedAt(objectKey) ?? 0, ttl.since_ms) + ttl.ttl_ms;
  }

  forget(service: string, objectKey: string): void {
    const at = this.touchedAt(objectKey);
    if (at === undefined) return;
    this.store.write(stateTtlTable.touchedKey(this.store.partition, objectKey), null);
    this.store.write(stateTtlTable.byTimeKey(this.store.partition, service, at, objectKey), null);
  }
}
