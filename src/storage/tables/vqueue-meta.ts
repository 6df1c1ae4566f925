// Table `vqm`: per flow-control queue (scope, limit key), what `sys_vqueue_meta` shows beyond what
// waits and runs: its invocations suspended, paused and finished (retained), and when one last
// started, attempted and finished. Kept by the fold as statuses change, so a rebuild gives the
// same. One row per queue ever used (as Restate keeps its vqueue metadata); the key is
// `scope:limitKey` (neither holds a `:`, see vqueues.ts).
import { assert } from '../../common/assert.js';
import { entriesIn, type Db } from '../store.js';
import { tablePrefix, tableRange } from '../keys.js';

export interface VqueueMeta {
  created_at_ms: number;
  suspended: number;
  paused: number;
  /** Completed invocations still retained (a purge or the end of retention takes one off). */
  finished: number;
  /** An invocation left the queue to run its first attempt. */
  last_start_at_ms?: number;
  /** Any attempt started (a first one, a retry, a resumption). */
  last_attempt_at_ms?: number;
  last_finish_at_ms?: number;
  /**
   * Moving averages, in ms, as Restate keeps them (each sample moves it by 5%: `ema`): how long
   * its invocations stayed in each stage, waited before their first start and took from due to
   * end, and what each attempt waited for before it started (0 for one that did not wait).
   */
  avg_ms?: Partial<Record<VqueueAverage, number>>;
}

export type VqueueAverage = 'queue' | 'inbox' | 'run' | 'suspension' | 'end_to_end' | 'blocked_on_concurrency_rules' | 'blocked_on_lock';

/**
 * Restate's exponential moving average (alpha 0.05), seeded with the first sample: `previous`
 * absent (or 0) takes the sample, so a change from zero shows at once.
 */
export function ema(previous: number | undefined, sample_ms: number): number {
  if (previous === undefined || previous === 0) return sample_ms;
  return Math.ceil(previous * 0.95 + sample_ms * 0.05);
}

const TABLE = 'vqm';
const SEP = ':';

export const vqueueMetaTable = {
  key: (partition: number, scope: string, limitKey: string): string => {
    assert(!scope.includes(SEP) && !limitKey.includes(SEP), () => `vqueue meta key of scope '${scope}', limit key '${limitKey}'`);
    return `${tablePrefix(partition, TABLE)}${scope}${SEP}${limitKey}`;
  },
  encode: (m: VqueueMeta): Buffer => Buffer.from(JSON.stringify(m)),
  decode: (raw: Buffer): VqueueMeta => JSON.parse(raw.toString('utf8')) as VqueueMeta,

  async *scan(db: Db, partition: number): AsyncGenerator<[scope: string, limitKey: string, meta: VqueueMeta]> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) {
      const rest = key.slice(prefix.length);
      const cut = rest.indexOf(SEP);
      assert(cut >= 0, () => `partition ${partition}: malformed vqueue meta key ${key}`);
      yield [rest.slice(0, cut), rest.slice(cut + 1), vqueueMetaTable.decode(value)];
    }
  },
};
