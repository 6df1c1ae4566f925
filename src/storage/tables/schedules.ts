// Table `sched`: the schedules of a partition (Keel's own: /schedules on the admin API), keyed by
// the schedule's id (scheduleId(name), an invocation id of the partition: its timer and the
// results of its firings are addressed to it). One JSON value each: a schedule is read and
// written whole, by the fold, a few times per firing.
import { entriesIn, type Db } from '../store.js';
import { tablePrefix, tableRange } from '../keys.js';

export type Overlap = 'skip' | 'buffer_one' | 'allow_all' | 'cancel_other';
export type CatchUp = 'one' | 'all' | 'skip';

export const OVERLAPS: readonly Overlap[] = ['skip', 'buffer_one', 'allow_all', 'cancel_other'];
export const CATCH_UPS: readonly CatchUp[] = ['one', 'all', 'skip'];

/** A firing started and not yet ended. */
export interface RunningFiring {
  seq: number;
  invocation_id: string;
  fire_ms: number;
  /** Started from the line of a catch-up `all`: what falls due while it runs waits in that line. */
  catch_up?: boolean;
}

export interface ScheduleOutcome {
  seq: number;
  /** Known when the firing that ended was the one started last (allow_all, cancel_other may end older ones). */
  invocation_id?: string;
  fire_ms?: number;
  ended_at_ms: number;
  failure?: { code: number; message: string };
}

export interface ScheduleRecord {
  id: string;
  name: string;
  service: string;
  handler: string;
  key: string;
  /** The input of every firing (JSON in the table: base64). */
  input: Buffer;
  headers: Array<{ key: string; value: string }>;
  service_type: string;
  handler_type: string;
  completion_retention_ms: number;
  journal_retention_ms: number;
  cron?: string;
  timezone?: string;
  every_ms?: number;
  overlap: Overlap;
  catchup: CatchUp;
  /** A firing that starts this late after its time (the server was down) is a missed one. */
  late_after_ms: number;
  paused: boolean;
  /** Declared in config.toml: kept as the configuration says, deleted when it no longer has it. */
  from_config: boolean;
  created_at_ms: number;
  modified_at_ms: number;
  /** Where an interval counts from: when the schedule was set or resumed (the log's time). */
  anchor_ms: number;
  /** The armed timer's time; undefined while paused or when nothing is left to fire. */
  next_at_ms?: number;
  /** Firings started (their sequence numbers are 1, 2, ...: the completion ids of their results). */
  seq: number;
  /** The first firing of this schedule, when it was made over a deleted one of the same name whose firings ran on. */
  first_seq?: number;
  /** Deleted while firings ran: kept until their results came back, shown nowhere. */
  deleted?: boolean;
  /** Firings started, and firings not started because of the overlap or catch-up policy. */
  fired: number;
  skipped: number;
  /** The firing started last, while it has not ended. */
  running?: RunningFiring;
  /** Firings started and not ended (allow_all and cancel_other may have several). */
  in_flight: number;
  /** Missed firings of catch-up `all` (and those due meanwhile) waiting for the running one to end, in order. */
  queued: number[];
  /** buffer_one: the latest firing that fell due while one ran; it starts when that one ends. */
  buffered_ms?: number;
  last_fire_ms?: number;
  last_invocation_id?: string;
  /** The last firing that ended (of the highest sequence number so far). */
  last_outcome?: ScheduleOutcome;
}

const TABLE = 'sched';

/** Firing times a schedule keeps waiting (catch-up `all` behind a running firing); past it they are skipped. */
export const MAX_QUEUED_FIRINGS = 100;

export const schedulesTable = {
  key: (partition: number, id: string): string => `${tablePrefix(partition, TABLE)}${id}`,

  encode(s: ScheduleRecord): Buffer {
    return Buffer.from(JSON.stringify({ ...s, input: s.input.toString('base64') }));
  },

  decode(raw: Buffer): ScheduleRecord {
    const v = JSON.parse(raw.toString('utf8')) as Omit<ScheduleRecord, 'input'> & { input: string };
    return { ...v, input: Buffer.from(v.input, 'base64') };
  },

  async *scan(db: Db, partition: number): AsyncGenerator<ScheduleRecord> {
    for await (const [, value] of entriesIn(db, tableRange(partition, TABLE))) yield schedulesTable.decode(value);
  },
};

/** A schedule's target as the API, SQL and the CLI write it: `Service/handler` or `Object/key/handler`. */
export function scheduleTarget(s: Pick<ScheduleRecord, 'service' | 'key' | 'handler'>): string {
  return s.key ? `${s.service}/${s.key}/${s.handler}` : `${s.service}/${s.handler}`;
}
