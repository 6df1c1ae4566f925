import { assert } from '../common/assert.js';
import { InvocationId } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import type { Db } from '../storage/store.js';
import { expiryTable } from '../storage/tables/expiry.js';
import { stateTtlTable, type StateTtl } from '../storage/tables/state-ttl.js';
import { stateKeysTable } from '../storage/tables/state-keys.js';
import type { PartitionProcessor } from './processor.js';

/** Retention purges appended per partition per cleanup run; the rest wait for the next run. */
const MAX_PURGES_PER_PARTITION_RUN = 10_000;
/** State expiries appended per service and partition per cleanup run; the rest wait for the next run. */
const MAX_EXPIRIES_PER_SERVICE_RUN = 10_000;
/** Index or object entries read per service and partition per cleanup run (held or not yet due ones are skipped). */
const MAX_READ_PER_SERVICE_RUN = 50_000;

/**
 * Retention (Restate's cleaner): completed invocations whose retention is over are purged
 * (status and journal), or lose only their journal when the journal retention is shorter; and
 * (Keel's own) the state of objects whose service's state TTL is over is expired. Nothing else
 * is deleted. The expiry and state-TTL indexes name what is due, so a run reads only that; it
 * appends a bounded number of commands per partition and waits for them, so it never floods a
 * partition, and runs one at a time. The fold decides again at the log's time.
 */
export class Cleaner {
  private interval: NodeJS.Timeout | undefined;
  /**
   * Sweeps for state older than its service's TTL, by partition, TTL start and service: where the
   * next run goes on from, null once done. One per service with a TTL and partition.
   */
  private readonly sweeps = new Map<string, string | undefined | null>();
  private running = false;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly processors: readonly PartitionProcessor[],
    private readonly logger: Logger,
  ) {}

  start(interval_ms: number): void {
    assert(this.interval === undefined, () => 'the cleaner started twice');
    this.interval = setInterval(() => {
      if (this.running) return;
      this.running = true;
      this.clean(Date.now())
        .then(({ purged, expired }) => (purged > 0 || expired > 0) && this.logger.info({ purged, state_expiries: expired }, 'retention cleanup: expired invocations purged, expired state cleared'))
        .catch((err) => this.logger.error({ err, code: 'RT0006' }, 'retention cleanup failed'))
        .finally(() => (this.running = false));
    }, interval_ms);
    this.interval.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.interval);
  }

  /** One run: appends the purges and state expiries due at `now_ms`; resolves with how many were taken. */
  async clean(now_ms: number): Promise<{ purged: number; expired: number }> {
    let purged = 0;
    let expired = 0;
    for (const p of this.processors) {
      if (p.health !== undefined || this.stopped) continue;
      purged += await this.purge(p, now_ms);
      expired += await this.expireState(p, now_ms);
    }
    return { purged, expired };
  }

  private async purge(p: PartitionProcessor, now_ms: number): Promise<number> {
    const appends: Promise<void>[] = [];
    for (const due of await expiryTable.due(this.db, p.partition, now_ms, MAX_PURGES_PER_PARTITION_RUN)) {
      const id = InvocationId.parse(due.id);
      assert(id !== undefined, () => `expiry entry with a malformed id ${due.id}`);
      appends.push(p.append({ kind: 'purge', purge: { invocation_id: id.bytes, ...(due.scope === 'journal' ? { journal_only: true } : {}) } }));
    }
    return this.settle(p, appends, 'retention purges');
  }

  /** Objects of each service with a state TTL whose TTL looks over at `now_ms`: one ExpireState each. */
  private async expireState(p: PartitionProcessor, now_ms: number): Promise<number> {
    let expired = 0;
    const book = p.state.ttl.entries();
    for (const ttl of book) {
      const appends: Promise<void>[] = [];
      let read = 0;
      for await (const c of stateTtlTable.touchedBefore(this.db, p.partition, ttl.service, now_ms - ttl.ttl_ms)) {
        // Read past what is held (a long workflow run) and what counts from the TTL's start, a bounded number.
        if (++read > MAX_READ_PER_SERVICE_RUN || appends.length >= MAX_EXPIRIES_PER_SERVICE_RUN) break;
        if (Math.max(c.at_ms, ttl.since_ms) + ttl.ttl_ms > now_ms || p.state.lockOf(c.objectKey) !== undefined) continue;
        appends.push(p.append({ kind: 'expire_state', expire_state: { object_key: c.objectKey } }));
      }
      expired += await this.settle(p, appends, 'state expiries');
    }
    return expired + (await this.sweepUntouched(p, book, now_ms));
  }

  /**
   * State written before its service got a TTL has no time in the index: once that TTL is over
   * (counted from when it was set), one sweep of the service's objects, a bounded number per
   * run, expires those never written (or accessed) since; the fold indexes one it keeps (a
   * held key), so that the index finds it later. The sweep's place is in memory: a restart
   * sweeps again.
   */
  private async sweepUntouched(p: PartitionProcessor, book: readonly StateTtl[], now_ms: number): Promise<number> {
    const due = book.filter((ttl) => ttl.since_ms + ttl.ttl_ms <= now_ms);
    const tags = new Map(due.map((ttl) => [`${p.partition}/${ttl.since_ms}/${ttl.service}`, ttl]));
    for (const tag of this.sweeps.keys()) if (tag.startsWith(`${p.partition}/`) && !tags.has(tag)) this.sweeps.delete(tag);
    let expired = 0;
    for (const [tag, ttl] of tags) {
      const cursor = this.sweeps.get(tag);
      if (cursor === null) continue;
      const { objectKeys, next } = await stateKeysTable.objectsOf(this.db, p.partition, ttl.service, cursor, MAX_READ_PER_SERVICE_RUN);
      const appends = objectKeys
        .filter((objectKey) => p.state.ttl.touchedAt(objectKey) === undefined)
        .map((objectKey) => p.append({ kind: 'expire_state', expire_state: { object_key: objectKey } }));
      const taken = await this.settle(p, appends, 'state expiries');
      expired += taken;
      // Past these only once all were taken: a refused one is asked again at the next run.
      if (taken === appends.length) this.sweeps.set(tag, next ?? null);
    }
    return expired;
  }

  private async settle(p: PartitionProcessor, appends: Promise<void>[], what: string): Promise<number> {
    const results = await Promise.allSettled(appends);
    const failed = results.filter((r) => r.status === 'rejected');
    if (failed.length > 0) {
      this.logger.warn({ partition: p.partition, failed: failed.length, err: (failed[0] as PromiseRejectedResult).reason }, `some ${what} were refused; they are retried at the next cleanup`);
    }
    return results.length - failed.length;
  }
}
