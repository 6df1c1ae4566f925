// Table `inv`: the status of every invocation of a partition, by id (JSON), keyed uuid first
// (keys.ts's `idKeyText`): the ids made here in the same minute share their keys' first digits.
import { entriesIn, valuesIn, type Db } from '../store.js';
import { idKeyText, idOfKeyText, tablePrefix, tableRange } from '../keys.js';

export type Status = 'scheduled' | 'inboxed' | 'running' | 'backing-off' | 'suspended' | 'paused' | 'completed';

export interface LastFailure {
  error_code: string;
  failure_code: number;
  message: string;
  related_entry_index?: number;
  related_entry_name?: string;
  related_entry_type?: number;
}

export interface InvocationResult {
  /** base64 of the output value */
  value?: string;
  failure?: { code: number; message: string; metadata?: Array<{ key: string; value: string }> };
}

/** The materialised status of one invocation. */
export interface InvocationStatus {
  id: string;
  service: string;
  handler: string;
  key: string;
  service_type: string;
  /** 'Exclusive' | 'Shared' | 'Workflow' | '' */
  handler_type: string;
  status: Status;
  /** Attempt number; entries from any other attempt are dropped. */
  epoch: number;
  journal_length: number;
  created_at_ms: number;
  modified_at_ms: number;
  idempotency_key?: string;
  /** The invocation waiting for this one's result (call), with the completion id to use. */
  caller_id?: string;
  caller_completion_id?: number;
  /** `Svc/handler` and id of the invocation that called or sent this one. */
  caller_target?: string;
  invoked_by_id?: string;
  /** The Kafka subscription whose record made this invocation. */
  invoked_by_subscription_id?: string;
  /** Flow control: the invocation's scope and limit key (`l1` or `l1/l2`); it holds a slot of their counters while it runs. */
  scope?: string;
  limit_key?: string;
  /** Keel's own (x-keel-priority, 0–9, with a scope): a higher one takes the next free slot of its scope first. */
  priority?: number;
  /** Set while it waits for a slot (status `inboxed`): its place in its (scope, limit key) queue. */
  flow_seq?: number;
  restarted_from?: string;
  /** W3C traceparent of the span that asked for the invocation (set only when traced). */
  traceparent?: string;
  /** Invocations this one called and waits for: killed with it. */
  children?: string[];
  /** Other invocations attached to this one's result. */
  attachers?: Array<{ id: string; completion_id: number; entry_type: number }>;
  scheduled_at_ms?: number;
  execute_at_ms?: number;
  inboxed_at_ms?: number;
  completion_retention_ms: number;
  journal_retention_ms: number;
  deployment_id?: string;
  protocol_version?: number;
  sdk_version?: string;
  retry_count: number;
  /**
   * Failed attempts since the attempt's last new command, and when that was stored (the log's
   * time): the StartMessage's `retry_count_since_last_stored_entry` and
   * `duration_since_last_stored_entry`, from which an SDK counts the tries of one `ctx.run`
   * against its own retry options. Absent in statuses stored before they were kept.
   */
  retries_since_command?: number;
  /**
   * Keel's own: attempts of each `ctx.run` step that needed more than one, by the completion id
   * of its result (sys_journal's `attempts`). Bounded by the journal.
   */
  step_attempts?: Record<string, number>;
  command_at_ms?: number;
  last_start_at_ms?: number;
  next_retry_at_ms?: number;
  last_failure?: LastFailure;
  waiting?: { completions: number[]; signals: number[]; named_signals: string[] };
  /** The Output command's result, recorded before End arrives. */
  output?: InvocationResult;
  completed_at_ms?: number;
  result?: InvocationResult;
  /**
   * Keel's, scoped invocations only: what it waits for while `inboxed`, since when (absent:
   * nothing counted, as while its queue is paused), and how many attempts it started.
   */
  waits_on?: BlockedOn;
  wait_since_ms?: number;
  starts?: number;
  /** Keel's, scoped invocations only: when a delayed one became due (its `execute_at_ms` is gone by then). */
  runnable_at_ms?: number;
  /** Keel's, scoped invocations only: when it entered its flow-control stage (stageOf), for sys_vqueue_meta's averages. */
  stage_since_ms?: number;
  /**
   * Keel's: the log time it spent waiting to start, by what it waited for — before the attempt
   * numbered `attempt` (the latest, or the next while it waits) and over all attempts
   * (sys_vqueue_entry_status's latest_attempt_blocked_on_* and total_blocked_on_*).
   */
  blocked_ms?: { attempt: number; latest: Partial<Record<BlockedOn, number>>; total: Partial<Record<BlockedOn, number>> };
}

/** The epoch of the attempt a waiting invocation waits to start (run() moves on from a started one's). */
export function nextAttempt(s: Pick<InvocationStatus, 'epoch' | 'last_start_at_ms'>): number {
  return s.last_start_at_ms === undefined ? s.epoch : s.epoch + 1;
}

/** What an invocation waiting to start waits for: a concurrency rule's slot, a rate's next start, its key's lock. */
export type BlockedOn = 'concurrency_rules' | 'throttling_rules' | 'lock';

const TABLE = 'inv';

export const invocationsTable = {
  key: (partition: number, id: string): string => `${tablePrefix(partition, TABLE)}${idKeyText(id)}`,

  range: (partition: number): { gte: string; lt: string } => tableRange(partition, TABLE),
  /** The id a key of this table is for, or undefined for a key of another table. */
  idOf(partition: number, key: string): string | undefined {
    const prefix = tablePrefix(partition, TABLE);
    return key.startsWith(prefix) ? idOfKeyText(key.slice(prefix.length)) : undefined;
  },
  encode: (s: InvocationStatus): Buffer => Buffer.from(JSON.stringify(s)),
  decode: (raw: Buffer): InvocationStatus => JSON.parse(raw.toString('utf8')) as InvocationStatus,

  /** Every stored status of the partition, in key order. */
  async *scan(db: Db, partition: number): AsyncGenerator<InvocationStatus> {
    for await (const value of valuesIn(db, tableRange(partition, TABLE))) yield invocationsTable.decode(value);
  },

  /** Every stored status of the partition as stored (JSON), undecoded, in key order. */
  async *records(db: Db, partition: number): AsyncGenerator<Buffer> {
    yield* valuesIn(db, tableRange(partition, TABLE));
  },

  /** Stored statuses whose id is not in `skip` (those the caller already has in memory). */
  async *scanExcept(db: Db, partition: number, skip: ReadonlySet<string>): AsyncGenerator<InvocationStatus> {
    const prefix = tablePrefix(partition, TABLE);
    for await (const [key, value] of entriesIn(db, tableRange(partition, TABLE))) {
      if (!skip.has(idOfKeyText(key.slice(prefix.length)))) yield invocationsTable.decode(value);
    }
  },
};
