import { assert } from '../common/assert.js';
import { InvocationId } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import type { Db } from '../storage/store.js';
import { expiryTable } from '../storage/tables/expiry.js';
import type { PartitionProcessor } from './processor.js';

/** Retention purges appended per partition per cleanup run; the rest wait for the next run. */
const MAX_PURGES_PER_PARTITION_RUN = 10_000;

/**
 * Retention (Restate's cleaner): completed invocations whose retention is over are purged
 * (status and journal), or lose only their journal when the journal retention is shorter.
 * Nothing else is deleted. The expiry index names what is due, so a run reads only that; it
 * appends a bounded number of purges per partition and waits for them, so it never floods a
 * partition, and runs one at a time.
 */
export class Cleaner {
  private interval: NodeJS.Timeout | undefined;
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
        .then((purged) => purged > 0 && this.logger.info({ purged }, 'retention cleanup: expired invocations purged'))
        .catch((err) => this.logger.error({ err, code: 'RT0006' }, 'retention cleanup failed'))
        .finally(() => (this.running = false));
    }, interval_ms);
    this.interval.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.interval);
  }

  /** One run: appends the purges due at `now_ms`; resolves with how many were taken. */
  async clean(now_ms: number): Promise<number> {
    let purged = 0;
    for (const p of this.processors) {
      if (p.health !== undefined || this.stopped) continue;
      const appends: Promise<void>[] = [];
      for (const due of await expiryTable.due(this.db, p.partition, now_ms, MAX_PURGES_PER_PARTITION_RUN)) {
        const id = InvocationId.parse(due.id);
        assert(id !== undefined, () => `expiry entry with a malformed id ${due.id}`);
        appends.push(p.append({ kind: 'purge', purge: { invocation_id: id.bytes, ...(due.scope === 'journal' ? { journal_only: true } : {}) } }));
      }
      const results = await Promise.allSettled(appends);
      const failed = results.filter((r) => r.status === 'rejected');
      purged += results.length - failed.length;
      if (failed.length > 0) {
        this.logger.warn({ partition: p.partition, failed: failed.length, err: (failed[0] as PromiseRejectedResult).reason }, 'some retention purges were refused; they are retried at the next cleanup');
      }
    }
    return purged;
  }
}
