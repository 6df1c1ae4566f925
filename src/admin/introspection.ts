// What the admin API needs from the partitions to answer `/query` and manage invocations, and
// the mapping of that live data to the introspection tables (Restate 1.7 `sys_*` schema).

import { KeelError } from '../errors/index.js';
import type { Registry } from '../metadata/registry.js';
import type { InvocationStatus } from '../partition/state.js';
import type { UserLimitRow } from '../partition/flow-control.js';
import { vqueueId } from '../common/limit-rules.js';
import { objectPartitionKey, scopePartitionKey } from '../common/ids.js';
import type { Schedule } from '../log/commands.js';
import { scheduleTarget, type ScheduleRecord } from '../storage/tables/schedules.js';
import type { VqueueMeta } from '../storage/tables/vqueue-meta.js';
import type { BlockedOn } from '../storage/tables/invocations.js';
import type { SubscriptionStatus } from '../subscriptions/manager.js';

/** One stored journal entry: its message type and payload, undecoded (the query engine decodes). */
export interface RawJournalEntry {
  type: number;
  payload: Uint8Array;
}

/**
 * Attempts of an invocation's `ctx.run` steps (Keel's own): `done` by the completion id of each
 * finished step that took more than one, `current` those of the step under way (its failed
 * attempts and the one running).
 */
export interface StepAttempts {
  done?: Record<string, number>;
  current?: number;
}

/** One partition as `GET /partitions` shows it (see partitions.ts). */
export interface PartitionInfo {
  partition: number;
  applied_position: number;
  queued_commands: number;
  max_queued_commands: number;
  writing: boolean;
  closed: boolean;
  /** Why the partition stopped (a broken invariant or a failed write), when it did. */
  failure?: string;
  /** Invocations held in memory by status (completed ones only as far as they are kept there). */
  invocations: Record<string, number>;
  /** Durable timers stored, and those of them held in memory (at most worker.num_timers_in_memory_limit). */
  timers: number;
  timers_in_memory: number;
  outbox: number;
  inboxed: number;
  /** The version of the rule book of flow control the partition's log holds (0: none yet). */
  limit_rules_version?: number;
}

export type ManageAction = 'cancel' | 'kill' | 'pause' | 'resume' | 'purge' | 'restart-as-new';

/** The refusal of a manage action naming an invocation that does not exist (Restate's words). */
export const unknownInvocation = (id: string): KeelError => new KeelError('KEEL0004', `The requested invocation '${id}' does not exist`);

/** What a manage action answers (Restate's statuses): 202 for what goes on in the background, the new id of a restart. */
export interface ManageAnswer {
  status: 200 | 202;
  body?: { new_invocation_id: string };
}

/** Status changes of a durable batch: the status as stored (JSON), or null when purged. */
export type InvocationChanges = Array<[id: string, status: Uint8Array | null]>;

/** A held lock: the object or workflow key, its holder and since when (absent for locks taken before Keel kept it). */
export interface LockRow {
  service: string;
  key: string;
  scope?: string;
  id: string;
  acquired_at_ms?: number;
}

export interface IntrospectionSource {
  /**
   * The stored status of every invocation as JSON (what `invocationsTable` stores), one per line,
   * in chunks that end with a line: the query engine's copy of `sys_invocation` starts from it.
   */
  invocationLines(): AsyncIterable<Uint8Array>;
  /** Calls `listener` with the statuses of every durable batch from now on; returns the stop function. */
  watchInvocations(listener: (changes: InvocationChanges) => void): () => void;
  /**
   * Resolves once every status change made durable before the call has reached the watchers;
   * absent where they hear of each batch as it becomes durable (one thread).
   */
  settled?(): Promise<void>;
  /** The stored journal of an invocation, undecoded (empty when there is none). */
  journalEntries(id: string): Promise<RawJournalEntry[]>;
  /** The attempts of the invocation's `ctx.run` steps, when it is known here. */
  stepAttempts?(id: string): Promise<StepAttempts | undefined>;
  /** How many invocations that have not completed are pinned to the deployment `id`. */
  unfinishedPinnedTo(deploymentId: string): Promise<number>;
  /**
   * What a replay check replays (admin/replay-check.ts): up to `limit` suspended invocations of
   * `services` pinned to `deploymentId` (copies, in the store's order), how many of those are
   * suspended, and the unfinished ones that are not, by status.
   */
  replayCandidates?(services: ReadonlySet<string>, deploymentId: string, limit: number): Promise<{ sample: InvocationStatus[]; suspended: number; other: Record<string, number> }>;
  state(): AsyncIterable<StateEntryRow>;
  inbox(): AsyncIterable<{ service: string; key: string; id: string; seq: number; created_at_ms: number; scope?: string }>;
  /** Flow-control queues of every partition (sys_vqueue_meta); absent in sources without partitions. */
  flowQueues?(): AsyncIterable<FlowQueueRow>;
  /** Pauses or resumes a flow-control queue (POST /vqueues/{id}/pause|resume); resolves once durable. */
  pauseFlowQueue?(scope: string, limitKey: string, paused: boolean): Promise<void>;
  /** Invocations waiting in flow-control queues (sys_vqueues). */
  flowEntries?(): AsyncIterable<FlowEntry>;
  /** What each flow-control queue with waiters is blocked on (sys_scheduler). */
  flowScheduler?(): AsyncIterable<{ scope: string; limit_key: string; waiting: number; head: string; blocked_on: string; blocked: Record<string, unknown>; ready_at_ms?: number; head_wait?: Wait }>;
  /** Flow-control counters of every partition (sys_user_limits); absent in sources without partitions. */
  userLimits?(): AsyncIterable<UserLimitRow & { partition_key: bigint }>;
  locks(): AsyncIterable<LockRow>;
  promises(): AsyncIterable<{ service: string; key: string; name: string; scope?: string; completed: boolean; value?: Buffer; failure?: { code: number; message: string } }>;
  /**
   * Cancels, kills, purges, pauses, resumes or restarts as new: the answer's status (202 for what
   * goes on in the background) and body. A refusal throws the KeelError naming it: KEEL0004 for an
   * unknown invocation, KEEL0008 for one not in a state for the action, KEEL0017-KEEL0019.
   */
  manage(id: string, action: ManageAction): Promise<ManageAnswer>;
  /**
   * Replaces the whole state of one object/workflow key (`POST /services/{svc}/state`).
   * `version` is what the CLI computed over the state it read (see `stateVersion`); apply
   * only if it still matches.
   */
  setState?(service: string, key: string, entries: Map<string, Buffer>, version?: string): Promise<void>;
  /** The partitions and how they are doing (`GET /partitions`). */
  partitions?(): Promise<PartitionInfo[]>;
  /** Kafka subscriptions' consumers: state, and position and lag per topic partition (all, or the one with `id`). */
  subscriptions?(id?: string): Promise<SubscriptionStatus[]>;
  /** Every schedule, from the store (`/schedules`, sys_schedule); absent in sources without partitions. */
  schedules?(): AsyncIterable<ScheduleRecord>;
  /** One schedule as its partition has it now. */
  schedule?(name: string): Promise<ScheduleRecord | undefined>;
  /** Appends a schedule command to the schedule's partition; resolves once it is durable. */
  applySchedule?(command: Schedule): Promise<void>;
}

/** A flow-control queue as sys_vqueue_meta shows it: what waits and runs now, and its meta (table vqm). */
export interface FlowQueueRow {
  scope: string;
  limit_key: string;
  paused: boolean;
  waiting: number;
  running: number;
  last_enqueued_at_ms?: number;
  created_at_ms?: number;
  meta?: VqueueMeta;
}

/** A source with nothing in it: `/query` still answers for the registry's tables. */
export const emptySource: IntrospectionSource = {
  invocationLines: async function* () {},
  watchInvocations: () => () => {},
  journalEntries: async () => [],
  unfinishedPinnedTo: async () => 0,
  state: async function* () {},
  inbox: async function* () {},
  locks: async function* () {},
  promises: async function* () {},
  manage: () => Promise.reject(new KeelError('KEEL0009', 'invocation management is not available on this server')),
};

export { stateVersion } from '../partition/state-version.js';

// ---------------------------------------------------------------------------------------------
// Table schemas. Kinds drive both the DuckDB declaration and the output encoding.

/** `interval`: a duration, given in ms in a row (Restate's Duration columns). */
export type ColumnKind = 'utf8' | 'int64' | 'uint32' | 'uint64' | 'float64' | 'bool' | 'ts' | 'binary' | 'interval';

export type TableSchema = Array<[name: string, kind: ColumnKind]>;

const INVOCATION_COLUMNS: TableSchema = [
  ['id', 'utf8'],
  ['target', 'utf8'],
  ['target_service_name', 'utf8'],
  ['target_service_key', 'utf8'],
  ['target_handler_name', 'utf8'],
  ['target_service_ty', 'utf8'],
  ['status', 'utf8'],
  ['completion_result', 'utf8'],
  ['completion_failure', 'utf8'],
  ['idempotency_key', 'utf8'],
  ['scope', 'utf8'],
  ['limit_key', 'utf8'],
  ['invoked_by', 'utf8'],
  ['invoked_by_id', 'utf8'],
  ['invoked_by_service_name', 'utf8'],
  ['invoked_by_target', 'utf8'],
  ['invoked_by_subscription_id', 'utf8'],
  ['restarted_from', 'utf8'],
  ['pinned_deployment_id', 'utf8'],
  ['pinned_service_protocol_version', 'uint64'],
  ['trace_id', 'utf8'],
  ['journal_size', 'uint64'],
  ['journal_commands_size', 'uint64'],
  ['created_at', 'ts'],
  ['modified_at', 'ts'],
  ['inboxed_at', 'ts'],
  ['scheduled_at', 'ts'],
  ['scheduled_start_at', 'ts'],
  ['running_at', 'ts'],
  ['completed_at', 'ts'],
  ['completion_retention', 'int64'],
  ['journal_retention', 'int64'],
  ['retry_count', 'uint64'],
  ['last_start_at', 'ts'],
  ['next_retry_at', 'ts'],
  ['last_attempt_deployment_id', 'utf8'],
  ['last_attempt_server', 'utf8'],
  ['last_failure', 'utf8'],
  ['last_failure_error_code', 'utf8'],
  ['last_failure_related_entry_index', 'uint64'],
  ['last_failure_related_entry_name', 'utf8'],
  ['last_failure_related_entry_type', 'utf8'],
  ['last_failure_related_command_index', 'uint64'],
  ['last_failure_related_command_name', 'utf8'],
  ['last_failure_related_command_type', 'utf8'],
  ['created_using_restate_version', 'utf8'],
];

export const TABLES: Record<string, TableSchema> = {
  sys_invocation: INVOCATION_COLUMNS,
  sys_invocation_status: [
    ['id', 'utf8'],
    ['target', 'utf8'],
    ['target_service_name', 'utf8'],
    ['target_service_key', 'utf8'],
    ['target_handler_name', 'utf8'],
    ['target_service_ty', 'utf8'],
    ['status', 'utf8'],
    ['completion_result', 'utf8'],
    ['completion_failure', 'utf8'],
    ['idempotency_key', 'utf8'],
    ['invoked_by', 'utf8'],
    ['invoked_by_id', 'utf8'],
    ['invoked_by_target', 'utf8'],
    ['pinned_deployment_id', 'utf8'],
    ['pinned_service_protocol_version', 'uint64'],
    ['journal_size', 'uint64'],
    ['created_at', 'ts'],
    ['modified_at', 'ts'],
    ['inboxed_at', 'ts'],
    ['scheduled_at', 'ts'],
    ['running_at', 'ts'],
    ['completed_at', 'ts'],
    ['created_using_restate_version', 'utf8'],
  ],
  sys_journal: [
    ['id', 'utf8'],
    ['index', 'uint64'],
    ['entry_type', 'utf8'],
    ['name', 'utf8'],
    ['completed', 'bool'],
    ['invoked_id', 'utf8'],
    ['invoked_target', 'utf8'],
    ['sleep_wakeup_at', 'ts'],
    ['promise_name', 'utf8'],
    ['raw', 'binary'],
    ['version', 'uint64'],
    ['entry_json', 'utf8'],
    ['entry_lite_json', 'utf8'],
    ['appended_at', 'ts'],
    // Keel's own: the attempts a ctx.run step took (each step has the retry policy to itself).
    ['attempts', 'uint32'],
  ],
  state: [
    ['service_name', 'utf8'],
    ['service_key', 'utf8'],
    ['key', 'utf8'],
    ['value_utf8', 'utf8'],
    ['value', 'binary'],
    ['scope', 'utf8'],
    // Keel's own: when the object's state expires (its service's state TTL); NULL without one.
    ['expires_at', 'ts'],
  ],
  sys_deployment: [
    ['id', 'utf8'],
    ['ty', 'utf8'],
    ['endpoint', 'utf8'],
    ['created_at', 'ts'],
    ['min_service_protocol_version', 'uint64'],
    ['max_service_protocol_version', 'uint64'],
    ['sdk_version', 'utf8'],
  ],
  sys_service: [
    ['name', 'utf8'],
    ['revision', 'uint64'],
    ['public', 'bool'],
    ['ty', 'utf8'],
    ['deployment_id', 'utf8'],
    ['deployment_type', 'utf8'],
  ],
  sys_inbox: [
    ['service_name', 'utf8'],
    ['service_key', 'utf8'],
    ['id', 'utf8'],
    ['sequence_number', 'uint64'],
    ['created_at', 'ts'],
    // Keel's: the flow-control scope of a scoped object's inbox (Restate 1.7.12 has no such column).
    ['scope', 'utf8'],
  ],
  sys_keyed_service_status: [
    ['service_name', 'utf8'],
    ['service_key', 'utf8'],
    ['invocation_id', 'utf8'],
    ['scope', 'utf8'],
  ],
  sys_promise: [
    ['service_name', 'utf8'],
    ['service_key', 'utf8'],
    ['key', 'utf8'],
    ['completed', 'bool'],
    ['completion_success_value', 'binary'],
    ['completion_success_value_utf8', 'utf8'],
    ['completion_failure', 'utf8'],
    ['scope', 'utf8'],
  ],
  sys_vqueue_meta: [
    ['id', 'utf8'],
    ['is_active', 'bool'],
    ['queue_is_paused', 'bool'],
    ['service_name', 'utf8'],
    ['scope', 'utf8'],
    ['limit_key', 'utf8'],
    ['lock_name', 'utf8'],
    ['created_at', 'ts'],
    ['last_enqueued_at', 'ts'],
    ['last_start_at', 'ts'],
    ['last_attempt_at', 'ts'],
    ['last_finish_at', 'ts'],
    ['avg_queue_duration', 'interval'],
    ['avg_inbox_duration', 'interval'],
    ['avg_run_duration', 'interval'],
    ['avg_suspension_duration', 'interval'],
    ['avg_end_to_end_duration', 'interval'],
    ['avg_blocked_on_concurrency_rules', 'interval'],
    ['avg_blocked_on_invoker_concurrency', 'interval'],
    ['avg_blocked_on_invoker_throttling', 'interval'],
    ['avg_blocked_on_lock', 'interval'],
    ['num_inbox', 'uint64'],
    ['num_running', 'uint64'],
    ['num_suspended', 'uint64'],
    ['num_paused', 'uint64'],
    ['num_finished', 'uint64'],
  ],
  // Keel's own: one row per topic partition of each subscription (GET /subscriptions/{id}/status).
  sys_subscription_partition: [
    ['subscription_id', 'utf8'],
    ['source', 'utf8'],
    ['sink', 'utf8'],
    ['topic', 'utf8'],
    ['partition', 'uint64'],
    ['position', 'int64'],
    ['high_watermark', 'int64'],
    ['lag', 'int64'],
    ['records_delivered', 'uint64'],
    ['records_skipped', 'uint64'],
    ['assigned', 'bool'],
    ['paused', 'bool'],
    ['consumer_state', 'utf8'],
    ['position_updated_at', 'ts'],
  ],
  // Flow control: one row per invocation waiting in a queue (stage inbox), as Restate's.
  sys_vqueues: [
    ['partition_key', 'uint64'],
    ['id', 'utf8'],
    ['stage', 'utf8'],
    ['status', 'utf8'],
    ['has_lock', 'bool'],
    ['sequence_number', 'uint64'],
    ['entry_id', 'utf8'],
    ['entry_kind', 'utf8'],
    ['created_at', 'ts'],
    ['transitioned_at', 'ts'],
    ['num_attempts', 'uint32'],
  ],
  // Flow control: each waiting entry's status, as Restate's (the blocked-time columns are not recorded: NULL).
  sys_vqueue_entry_status: [
    ['partition_key', 'uint64'],
    ['entry_id', 'utf8'],
    ['vqueue_id', 'utf8'],
    ['stage', 'utf8'],
    ['status', 'utf8'],
    ['has_lock', 'bool'],
    ['next_at', 'ts'],
    ['sequence_number', 'uint64'],
    ['entry_kind', 'utf8'],
    ['created_at', 'ts'],
    ['transitioned_at', 'ts'],
    ['num_attempts', 'uint32'],
    ['num_errors', 'uint32'],
    ['num_pauses', 'uint32'],
    ['num_suspensions', 'uint32'],
    ['num_yields', 'uint32'],
    ['first_attempt_at', 'ts'],
    ['latest_attempt_at', 'ts'],
    ['first_runnable_at', 'ts'],
    ['deployment', 'utf8'],
    ['needed_memory', 'uint64'],
    ['retry_attempts', 'uint32'],
    ['retry_count_since_last_stored_command', 'uint32'],
    ['latest_attempt_blocked_on_invoker_concurrency', 'interval'],
    ['latest_attempt_blocked_on_throttling_rules', 'interval'],
    ['latest_attempt_blocked_on_invoker_throttling', 'interval'],
    ['latest_attempt_blocked_on_invoker_memory', 'interval'],
    ['latest_attempt_blocked_on_concurrency_rules', 'interval'],
    ['latest_attempt_blocked_on_lock', 'interval'],
    ['latest_attempt_blocked_on_deployment_concurrency', 'interval'],
    ['total_blocked_on_invoker_concurrency', 'interval'],
    ['total_blocked_on_throttling_rules', 'interval'],
    ['total_blocked_on_invoker_throttling', 'interval'],
    ['total_blocked_on_invoker_memory', 'interval'],
    ['total_blocked_on_concurrency_rules', 'interval'],
    ['total_blocked_on_lock', 'interval'],
    ['total_blocked_on_deployment_concurrency', 'interval'],
  ],
  // Flow control: what each queue with waiters is blocked on, as Restate's.
  sys_scheduler: [
    ['partition_key', 'uint64'],
    ['id', 'utf8'],
    ['num_inbox', 'uint64'],
    ['status', 'utf8'],
    ['head_entry_id', 'utf8'],
    ['scheduled_at', 'ts'],
    ['blocked_on', 'utf8'],
    ['blocked_on_json', 'utf8'],
    ['invoker_concurrency_block_duration', 'interval'],
    ['throttling_rules_block_duration', 'interval'],
    ['invoker_throttling_block_duration', 'interval'],
    ['invoker_memory_block_duration', 'interval'],
    ['concurrency_rules_block_duration', 'interval'],
    ['lock_block_duration', 'interval'],
    ['deployment_concurrency_block_duration', 'interval'],
  ],
  // Object and workflow locks with their holder, as Restate 1.8's (scope set for scoped keys).
  sys_locks: [
    ['partition_key', 'uint64'],
    ['scope', 'utf8'],
    ['lock_name', 'utf8'],
    ['acquired_at', 'ts'],
    ['acquired_by', 'utf8'],
  ],
  // Flow control's live counters, as Restate's: one row per (scope[, l1[, l2]]) in use or waited on.
  sys_user_limits: [
    ['partition_key', 'uint64'],
    ['scope', 'utf8'],
    ['l1', 'utf8'],
    ['l2', 'utf8'],
    ['level', 'utf8'],
    ['usage', 'uint32'],
    ['concurrency_limit', 'uint32'],
    ['rule_pattern', 'utf8'],
    ['available', 'uint32'],
    ['num_waiters', 'uint64'],
  ],
  // Keel's own schedules (/schedules): when each fires next, what its last firing did.
  sys_schedule: [
    ['name', 'utf8'],
    ['target', 'utf8'],
    ['cron', 'utf8'],
    ['timezone', 'utf8'],
    ['every_ms', 'uint64'],
    ['overlap', 'utf8'],
    ['catchup', 'utf8'],
    ['paused', 'bool'],
    ['next_fire_at', 'ts'],
    ['last_fire_at', 'ts'],
    ['last_invocation_id', 'utf8'],
    ['running_invocation_id', 'utf8'],
    ['last_outcome', 'utf8'],
    ['last_failure', 'utf8'],
    ['last_ended_at', 'ts'],
    ['fired', 'uint64'],
    ['skipped', 'uint64'],
    ['queued', 'uint64'],
    ['created_at', 'ts'],
    ['modified_at', 'ts'],
  ],
  // The rule book (PUT /limits/rules): concurrency NULL is unlimited.
  sys_rules: [
    ['pattern', 'utf8'],
    ['concurrency', 'uint32'],
    ['description', 'utf8'],
    ['disabled', 'bool'],
    ['version', 'uint32'],
    ['last_modified', 'ts'],
    // Keel's own: the rate limit (starts per interval) and the backlog limit; NULL when none.
    ['rate_starts', 'uint32'],
    ['rate_interval_ms', 'uint64'],
    ['backlog', 'uint32'],
  ],
};

// ---------------------------------------------------------------------------------------------
// Row mapping of the tables filled per query. Values: timestamps as RFC 3339 text with ms and Z,
// booleans as 0/1, binary as Uint8Array; the engine casts them to the column kinds of TABLES.

export type Row = Record<string, string | number | Uint8Array | null | undefined>;

/** The widest instant a JavaScript Date holds (±100,000,000 days around 1970), in ms. */
const MAX_DATE_MS = 8.64e15;

/** RFC 3339 of `ms`; null when there is none or it is outside what a timestamp can hold. */
export function ts(ms: number | undefined | null): string | null {
  if (ms === undefined || ms === null || !Number.isFinite(ms) || Math.abs(ms) > MAX_DATE_MS) return null;
  return new Date(ms).toISOString();
}

function serviceTy(t: string | undefined): string {
  switch (t) {
    case 'VirtualObject':
    case 'virtual_object':
    case 'VIRTUAL_OBJECT':
      return 'virtual_object';
    case 'Workflow':
    case 'workflow':
    case 'WORKFLOW':
      return 'workflow';
    default:
      return 'service';
  }
}

function utf8OrNull(b: Buffer): string | null {
  const s = b.toString('utf8');
  return Buffer.from(s, 'utf8').equals(b) ? s : null;
}

/** One state entry of an object; `expires_at_ms` when its service has a state TTL (Keel's own). */
export interface StateEntryRow {
  service: string;
  key: string;
  state_key: string;
  value: Buffer;
  scope?: string;
  expires_at_ms?: number;
}

export function stateRow(r: StateEntryRow): Row {
  return {
    service_name: r.service,
    service_key: r.key,
    key: r.state_key,
    value_utf8: utf8OrNull(r.value),
    value: new Uint8Array(r.value),
    scope: r.scope ?? null,
    expires_at: ts(r.expires_at_ms),
  };
}

export function promiseRow(p: { service: string; key: string; name: string; scope?: string; completed: boolean; value?: Buffer; failure?: { code: number; message: string } }): Row {
  return {
    service_name: p.service,
    service_key: p.key,
    key: p.name,
    completed: p.completed ? 1 : 0,
    completion_success_value: p.value ? new Uint8Array(p.value) : null,
    completion_success_value_utf8: p.value ? utf8OrNull(p.value) : null,
    completion_failure: p.failure ? `[${p.failure.code}] ${p.failure.message}` : null,
    scope: p.scope ?? null,
  };
}

/** `sys_subscription_partition`: each subscription's topic partitions. */
export function subscriptionPartitionRows(statuses: SubscriptionStatus[]): Row[] {
  return statuses.flatMap((s) =>
    s.partitions.map((p) => ({
      subscription_id: s.id,
      source: s.source,
      sink: s.sink,
      topic: s.topic,
      partition: p.partition,
      position: p.position,
      high_watermark: p.high_watermark,
      lag: p.lag,
      records_delivered: p.records_delivered,
      records_skipped: p.records_skipped,
      assigned: p.assigned ? 1 : 0,
      paused: p.paused ? 1 : 0,
      consumer_state: s.state,
      position_updated_at: ts(p.position_updated_at_ms),
    })),
  );
}

export function deploymentRows(registry: Registry): Row[] {
  return registry.deployments().map((d) => ({
    id: d.id,
    ty: d.arn !== undefined ? 'lambda' : 'http',
    endpoint: d.arn ?? d.uri,
    created_at: ts(d.created_at_ms),
    min_service_protocol_version: d.min_protocol_version,
    max_service_protocol_version: d.max_protocol_version,
    sdk_version: d.sdk_version ?? null,
  }));
}

export function serviceRows(registry: Registry): Row[] {
  return registry.services().map((s) => ({
    name: s.name,
    revision: s.revision,
    public: s.public ? 1 : 0,
    ty: serviceTy(s.ty),
    deployment_id: s.deployment_id,
    deployment_type: 'http',
  }));
}

/** `sys_rules`: the rule book, sorted by pattern. */
export function ruleRows(registry: Registry): Row[] {
  return registry.limitRules().rules.map((r) => ({
    pattern: r.pattern,
    concurrency: r.concurrency ?? null,
    description: r.description ?? null,
    disabled: r.disabled ? 1 : 0,
    version: r.version,
    last_modified: ts(r.last_modified_ms),
    rate_starts: r.rate?.starts ?? null,
    rate_interval_ms: r.rate?.interval_ms ?? null,
    backlog: r.backlog ?? null,
  }));
}

/**
 * Values a query's WHERE pins columns of a table to (`col = 'x'` or `col IN (...)` on the table
 * alone): a row source may leave out rows that cannot match, never one that can.
 */
export type TableFilter = Readonly<Record<string, readonly string[]>>;

export interface RowContext {
  source: IntrospectionSource;
  registry: Registry;
}

/** Rows of one table filled per query, for the columns of TABLES[name]. */
export type RowSource = (ctx: RowContext, filter: TableFilter) => AsyncIterable<Row> | Iterable<Row>;

/**
 * Cheap size of a row for max_result_bytes (strings and bytes dominate): the server counts the
 * rows it sends for a per-query table, the engine the journal rows it decodes.
 */
export function rowBytes(r: Row): number {
  let n = 16;
  for (const v of Object.values(r)) n += typeof v === 'string' ? v.length : v instanceof Uint8Array ? v.length : 8;
  return n;
}

const pinned = (filter: TableFilter, column: string, value: string): boolean => filter[column] === undefined || filter[column].includes(value);
const keyed = (filter: TableFilter, service: string, key: string) => pinned(filter, 'service_name', service) && pinned(filter, 'service_key', key);

/** An invocation waiting in a flow-control queue, as the partitions report it. */
export interface FlowEntry extends Wait {
  scope: string;
  limit_key: string;
  id: string;
  seq: number;
  created_at_ms?: number;
  inboxed_at_ms?: number;
  /** It ran before (it resumed, and waits for a slot again). */
  started_before: boolean;
  last_start_at_ms?: number;
  deployment_id?: string;
  /** When it could first run: its scheduled time, or its creation. */
  runnable_at_ms?: number;
  retry_count?: number;
  retries_since_command?: number;
  /** Attempts it started. */
  starts: number;
}

/** A waiting invocation's wait: what it waits for now, since when, and what it waited for before (InvocationStatus.blocked_ms). */
export interface Wait {
  /** The start of its current stretch of waiting for `waits_on`. */
  since_ms?: number;
  waits_on?: BlockedOn;
  blocked_ms?: InvocationStatus['blocked_ms'];
  /** The attempt it waits to start. */
  next_attempt: number;
}

/** Restate's resources an invocation can be blocked on, in its columns' order. */
const BLOCKED_ON = ['invoker_concurrency', 'throttling_rules', 'invoker_throttling', 'invoker_memory', 'concurrency_rules', 'lock', 'deployment_concurrency'] as const;

/**
 * A waiting invocation's blocked time by resource, in ms, for the attempt it waits to start
 * (`latest`) and over all (`total`), its wait so far counted against what it waits on now. What
 * Keel has no counterpart of (an invoker memory pool, node-level throttling) is 0; the invoker's
 * own waits (its concurrency, a deployment's limit) are not folded: null.
 */
function blockedTimes(w: Wait, now_ms: number): { latest: Record<string, number | null>; total: Record<string, number | null> } {
  const waited_ms = w.waits_on !== undefined && w.since_ms !== undefined ? Math.max(0, now_ms - w.since_ms) : 0;
  const before = w.blocked_ms?.attempt === w.next_attempt ? w.blocked_ms.latest : {};
  const all = w.blocked_ms?.total ?? {};
  const latest: Record<string, number | null> = {};
  const total: Record<string, number | null> = {};
  for (const on of BLOCKED_ON) {
    if (on === 'concurrency_rules' || on === 'throttling_rules' || on === 'lock') {
      const now = w.waits_on === on ? waited_ms : 0;
      latest[on] = (before[on] ?? 0) + now;
      total[on] = (all[on] ?? 0) + now;
    } else {
      latest[on] = total[on] = on === 'invoker_throttling' || on === 'invoker_memory' ? 0 : null;
    }
  }
  return { latest, total };
}

/** sys_scheduler's: the time its head waited, by resource, for the attempt it waits to start. */
function schedulerBlocked(head: Wait | undefined, now_ms: number): Row {
  const row: Row = {};
  const latest = head === undefined ? undefined : blockedTimes(head, now_ms).latest;
  for (const on of BLOCKED_ON) row[`${on}_block_duration`] = latest?.[on] ?? null;
  return row;
}

function blockedColumns(e: FlowEntry, now_ms: number): Row {
  const { latest, total } = blockedTimes(e, now_ms);
  const row: Row = {};
  for (const on of BLOCKED_ON) {
    row[`latest_attempt_blocked_on_${on}`] = latest[on]!;
    row[`total_blocked_on_${on}`] = total[on]!;
  }
  return row;
}

/**
 * sys_vqueue_meta's moving averages (NULL before a first sample). The invoker's own waits are not
 * folded (NULL), and Keel has no invoker throttling (0 once an attempt started).
 */
function averageColumns(avg: VqueueMeta['avg_ms']): Row {
  const a = avg ?? {};
  const started = a.blocked_on_concurrency_rules !== undefined;
  return {
    avg_queue_duration: a.queue ?? null, avg_inbox_duration: a.inbox ?? null, avg_run_duration: a.run ?? null,
    avg_suspension_duration: a.suspension ?? null, avg_end_to_end_duration: a.end_to_end ?? null,
    avg_blocked_on_concurrency_rules: a.blocked_on_concurrency_rules ?? null, avg_blocked_on_invoker_concurrency: null,
    avg_blocked_on_invoker_throttling: started ? 0 : null, avg_blocked_on_lock: a.blocked_on_lock ?? null,
  };
}

/** A flow-control entry waiting in its queue, with the columns of sys_vqueues and sys_vqueue_entry_status (`now_ms`: its blocked times). */
function entryRow(e: FlowEntry, now_ms?: number): Row {
  const queue = vqueueId(e.scope, e.limit_key);
  return {
    partition_key: scopePartitionKey(e.scope).toString(), id: queue, vqueue_id: queue, entry_id: e.id, entry_kind: 'invocation',
    stage: 'inbox', status: e.started_before ? 'yielded' : 'new', has_lock: 0, next_at: null, sequence_number: e.seq,
    created_at: ts(e.created_at_ms), transitioned_at: ts(e.inboxed_at_ms), num_attempts: e.starts,
    num_errors: e.retry_count ?? 0, num_pauses: null, num_suspensions: null, num_yields: null,
    first_attempt_at: null, latest_attempt_at: ts(e.last_start_at_ms), first_runnable_at: ts(e.runnable_at_ms), deployment: e.deployment_id ?? null,
    needed_memory: null, retry_attempts: e.retry_count ?? 0, retry_count_since_last_stored_command: e.retries_since_command ?? 0,
    ...(now_ms !== undefined ? blockedColumns(e, now_ms) : {}),
  };
}

/**
 * The tables built from live data for each query that names them. `sys_invocation` and
 * `sys_invocation_status` are not here (the engine keeps a copy of them up to date), nor
 * `sys_journal` (read by invocation id and decoded in the engine's process).
 */
export const PER_QUERY_TABLES: Record<string, RowSource> = {
  state: async function* ({ source }, filter) {
    for await (const r of source.state()) if (keyed(filter, r.service, r.key)) yield stateRow(r);
  },
  sys_inbox: async function* ({ source }, filter) {
    for await (const r of source.inbox()) {
      if (keyed(filter, r.service, r.key)) yield { service_name: r.service, service_key: r.key, id: r.id, sequence_number: r.seq, created_at: ts(r.created_at_ms), scope: r.scope ?? null };
    }
  },
  sys_keyed_service_status: async function* ({ source }, filter) {
    for await (const r of source.locks()) if (keyed(filter, r.service, r.key)) yield { service_name: r.service, service_key: r.key, invocation_id: r.id, scope: r.scope ?? null };
  },
  sys_promise: async function* ({ source }, filter) {
    for await (const p of source.promises()) if (keyed(filter, p.service, p.key)) yield promiseRow(p);
  },
  sys_deployment: ({ registry }) => deploymentRows(registry),
  sys_service: ({ registry }) => serviceRows(registry),
  sys_rules: ({ registry }) => ruleRows(registry),
  sys_vqueue_meta: async function* ({ source }) {
    for await (const q of source.flowQueues?.() ?? []) {
      const m = q.meta;
      yield {
        id: vqueueId(q.scope, q.limit_key), is_active: q.waiting > 0 || q.running > 0 || (m?.suspended ?? 0) > 0 || (m?.paused ?? 0) > 0 ? 1 : 0, queue_is_paused: q.paused ? 1 : 0,
        service_name: null, scope: q.scope, limit_key: q.limit_key === '' ? null : q.limit_key, lock_name: null,
        created_at: ts(m?.created_at_ms ?? q.created_at_ms), last_enqueued_at: ts(q.last_enqueued_at_ms),
        last_start_at: ts(m?.last_start_at_ms), last_attempt_at: ts(m?.last_attempt_at_ms), last_finish_at: ts(m?.last_finish_at_ms),
        ...averageColumns(m?.avg_ms),
        num_inbox: q.waiting, num_running: q.running, num_suspended: m?.suspended ?? 0, num_paused: m?.paused ?? 0, num_finished: m?.finished ?? 0,
      };
    }
  },
  // One row per waiting entry in both: a row holds every column of the two (the engine reads the table's own).
  sys_vqueues: async function* ({ source }) {
    for await (const e of source.flowEntries?.() ?? []) yield entryRow(e);
  },
  sys_vqueue_entry_status: async function* ({ source }) {
    const now_ms = Date.now();
    for await (const e of source.flowEntries?.() ?? []) yield entryRow(e, now_ms);
  },
  sys_scheduler: async function* ({ source }) {
    const now_ms = Date.now();
    for await (const q of source.flowScheduler?.() ?? []) {
      yield {
        partition_key: scopePartitionKey(q.scope).toString(), id: vqueueId(q.scope, q.limit_key), num_inbox: q.waiting, status: 'blocked', head_entry_id: q.head,
        scheduled_at: ts(q.ready_at_ms), blocked_on: q.blocked_on, blocked_on_json: JSON.stringify(q.blocked),
        ...schedulerBlocked(q.head_wait, now_ms),
      };
    }
  },
  sys_locks: async function* ({ source }) {
    for await (const l of source.locks()) {
      const partition_key = l.scope !== undefined ? scopePartitionKey(l.scope) : objectPartitionKey(l.service, l.key);
      yield { partition_key: partition_key.toString(), scope: l.scope ?? null, lock_name: `${l.service}/${l.key}`, acquired_at: ts(l.acquired_at_ms), acquired_by: l.id };
    }
  },
  sys_schedule: async function* ({ source }) {
    for await (const s of source.schedules?.() ?? []) {
      const o = s.last_outcome;
      yield {
        name: s.name, target: scheduleTarget(s),
        cron: s.cron ?? null, timezone: s.cron !== undefined ? (s.timezone ?? 'UTC') : null, every_ms: s.every_ms ?? null,
        overlap: s.overlap, catchup: s.catchup, paused: s.paused ? 1 : 0,
        next_fire_at: ts(s.next_at_ms), last_fire_at: ts(s.last_fire_ms), last_invocation_id: s.last_invocation_id ?? null,
        running_invocation_id: s.running?.invocation_id ?? null,
        last_outcome: o === undefined ? null : o.failure ? 'failed' : 'succeeded',
        last_failure: o?.failure ? `[${o.failure.code}] ${o.failure.message}` : null, last_ended_at: ts(o?.ended_at_ms),
        fired: s.fired, skipped: s.skipped, queued: s.queued.length + (s.buffered_ms !== undefined ? 1 : 0), created_at: ts(s.created_at_ms), modified_at: ts(s.modified_at_ms),
      };
    }
  },
  sys_user_limits: async function* ({ source }) {
    // The u64 partition key travels as its decimal text (Row holds no bigint); the column is UBIGINT.
    for await (const r of source.userLimits?.() ?? []) yield { ...r, partition_key: r.partition_key.toString() };
  },
  sys_subscription_partition: async function* ({ source }) {
    yield* subscriptionPartitionRows((await source.subscriptions?.()) ?? []);
  },
};

/**
 * Per-query tables whose rows come from the schema registry alone: the same while its version is
 * (Registry.version), so the engine keeps them filled between queries instead of per query.
 */
export const REGISTRY_TABLES: ReadonlySet<string> = new Set(['sys_deployment', 'sys_service', 'sys_rules']);
