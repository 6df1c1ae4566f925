// Folding what a partition's log holds beyond what this node's store applied: when a node takes
// the lead of a partition (records other leaders appended), and on a standby that follows the
// partitions it does not lead, so that taking over later reads only the last moments.
import { decodeCommand } from '../log/commands.js';
import type { KafkaLog } from '../log/kafka-log.js';
import type { PartitionLog } from '../log/partition-log.js';
import type { Db, StateWrite } from '../storage/store.js';
import type { Logger } from '../common/logger.js';
import { fold } from './fold/index.js';
import { loadState } from './recovery.js';
import type { PartitionState } from './state.js';

/** Records folded between two writes of the state. */
const CHUNK_RECORDS = 512;

/**
 * Folds `records` (read from `log`, after its applied position) into `state` and writes the
 * state with the log's cursor every CHUNK_RECORDS records and at the end. Actions are dropped:
 * whoever runs the partition next derives them from the state.
 */
export async function foldRead(
  log: PartitionLog,
  records: AsyncIterable<[position: number, record: Buffer]>,
  state: PartitionState,
  observe?: (partition: number, writes: readonly StateWrite[]) => void,
): Promise<void> {
  let folded = 0;
  let last = log.applied_position;
  const write = async (): Promise<void> => {
    const writes = state.takeWrites();
    await log.advance(last, writes);
    state.writesDurable();
    observe?.(log.partition, writes);
    folded = 0;
  };
  for await (const [position, record] of records) {
    const cmd = decodeCommand(record);
    fold({ state, actions: [], now_ms: cmd.timestamp_ms ?? 0 }, cmd);
    last = position;
    if (++folded >= CHUNK_RECORDS) await write();
  }
  if (folded > 0) await write();
}

/**
 * Keeps this node's store of one partition in step with its log while another node leads it.
 * `stop` resolves once what was read is written: the store is then ready for `lead`. When the
 * leader trims the log past what this node read (it was paused longer than two snapshot
 * intervals), `reopen` opens the log again, which restores the newest snapshot first.
 */
export class PartitionFollower {
  private stopping = false;
  private readonly done: Promise<void>;

  constructor(
    db: Db,
    private log: KafkaLog,
    reopen: () => Promise<KafkaLog>,
    state_cache_bytes: number | undefined,
    logger: Logger,
    /** Reads of this node see the partition's state as followed here (`state`), and the statuses each chunk wrote (`observe`). */
    reads: { state?: (state: PartitionState | undefined) => void; observe?: (partition: number, writes: readonly StateWrite[]) => void } = {},
  ) {
    this.done = (async () => {
      while (!this.stopping) {
        const state = await loadState(db, this.log.partition, state_cache_bytes);
        reads.state?.(state);
        try {
          // Each round reads to the end of the log and writes what it folded.
          while (!this.stopping) await foldRead(this.log, this.log.readNew(), state, reads.observe);
        } catch (err) {
          if ((err as { type?: unknown }).type !== 'OFFSET_OUT_OF_RANGE' || this.stopping) throw err;
          logger.info({ partition: this.log.partition, applied_position: this.log.applied_position }, 'the log was trimmed past what this node followed; restoring the newest snapshot');
          this.log = await reopen();
        }
      }
    })()
      .catch((err: unknown) => {
        // The next leader reads from what was written: following is an optimisation, never needed.
        logger.warn({ err, code: 'KEEL0801', partition: this.log.partition }, 'following the partition log failed; the node catches up when it takes the lead');
      })
      .finally(() => reads.state?.(undefined));
  }

  get partition(): number {
    return this.log.partition;
  }

  /** Settles when following ends: stopped, or failed (logged). */
  get ended(): Promise<void> {
    return this.done;
  }

  get applied_position(): number {
    return this.log.applied_position;
  }

  /** The leader epoch announced last in what this node has read of the partition's log. */
  get announced_epoch(): number {
    return this.log.announced_epoch;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.done;
  }
}
