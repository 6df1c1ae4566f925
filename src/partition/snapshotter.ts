// Snapshots of the partitions a cluster node leads, and the trimming of their Kafka logs below
// them: the log would otherwise grow forever, and a node that never had a partition would read
// all of it. Each partition is snapshotted once it has applied `interval_records` since its
// last snapshot; the newest `kept` are kept and, once there are that many, the log is trimmed
// below the oldest of them, so a node whose copy is older than that restores a snapshot
// (kafka-log.ts restoreIfBehind) and the older snapshots are spares for a damaged newest one.
import type { Logger } from '../common/logger.js';
import { snapshotPartition, type SnapshotStore } from '../storage/snapshots.js';
import type { Db } from '../storage/store.js';

/** How often the leader looks for partitions due a snapshot. */
export const SNAPSHOT_CHECK_MS = 2_000;
/**
 * A write left unfinished this long ago is one whose writer died (a snapshot of a large partition
 * takes seconds to minutes): its file is removed so the shared directory stays bounded.
 */
const UNFINISHED_AGE_MS = 3_600_000;

export interface SnapshotterSettings {
  interval_records: number;
  kept: number;
}

export class Snapshotter {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  /** The log position each partition's newest snapshot covers (read from the store on first use). */
  private readonly last = new Map<number, number>();

  constructor(
    private readonly db: Db,
    private readonly store: SnapshotStore,
    /** The partitions led here and the last position each applied. */
    private readonly partitions: () => ReadonlyArray<{ partition: number; applied_position: number }>,
    /** Drops a partition's log records below an offset. */
    private readonly trim: (partition: number, offset: number) => Promise<void>,
    private readonly settings: SnapshotterSettings,
    private readonly logger: Logger,
  ) {}

  start(check_ms = SNAPSHOT_CHECK_MS): void {
    this.timer = setInterval(() => {
      this.round ??= this.snapshotDue().finally(() => (this.round = undefined));
    }, check_ms);
    this.timer.unref();
  }

  /** Stops looking, and waits for a snapshot being written. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.round;
  }

  /** Snapshots every partition due one, one after another (a snapshot reads the partition's whole key range). */
  async snapshotDue(): Promise<void> {
    for (const { partition, applied_position } of this.partitions()) {
      try {
        const last = this.last.get(partition) ?? (await this.store.list(partition)).at(-1)?.cursor.position ?? 0;
        this.last.set(partition, last);
        if (applied_position - last >= this.settings.interval_records) await this.take(partition);
      } catch (err) {
        this.logger.warn({ err, code: 'KEEL0804', partition }, 'cannot snapshot the partition; its log is not trimmed until a snapshot is written');
      }
    }
  }

  private async take(partition: number): Promise<void> {
    const started = performance.now();
    const taken = await snapshotPartition(this.db, partition, this.store);
    if (taken === undefined) return;
    this.last.set(partition, taken.cursor.position);
    const all = await this.store.list(partition);
    const kept = all.slice(-this.settings.kept);
    for (const old of all.slice(0, all.length - kept.length)) await this.store.delete(old);
    // Until `kept` snapshots exist the log stays whole: the older ones are the spares should the
    // newest be unreadable, and the log must reach back to each of them.
    const trimmed_below = kept.length === this.settings.kept ? kept[0]!.cursor.offset : undefined;
    if (trimmed_below !== undefined) await this.trim(partition, trimmed_below);
    const removed = await this.store.removeUnfinished(partition, UNFINISHED_AGE_MS);
    if (removed > 0) this.logger.warn({ partition, removed, code: 'KEEL0804' }, 'removed snapshot files a writer left unfinished over an hour ago');
    this.logger.info({ partition, snapshot: taken.name, position: taken.cursor.position, offset: taken.cursor.offset, bytes: taken.bytes, trimmed_below, took_ms: Math.round(performance.now() - started) }, 'partition snapshot written');
  }
}
