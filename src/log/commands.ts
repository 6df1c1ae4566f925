import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

const root = new protobuf.Root().loadSync(fileURLToPath(new URL('../../proto/keel.proto', import.meta.url)), { keepCase: true });
const CommandType = root.lookupType('keel.log.Command');

export interface Header {
  key: string;
  value: string;
}

export interface Invoke {
  invocation_id: Buffer;
  service: string;
  handler: string;
  key?: string;
  input?: Buffer;
  headers?: Header[];
  idempotency_key?: string;
  execute_at_ms?: number;
  service_type?: string;
  handler_type?: string;
  caller_invocation_id?: Buffer;
  caller_completion_id?: number;
  completion_retention_ms?: number;
  journal_retention_ms?: number;
  caller_target?: string;
  invoked_by_id?: string;
  restarted_from?: string;
}

export interface JournalAppend {
  invocation_id: Buffer;
  epoch: number;
  entry_type: number;
  entry: Buffer;
  requested_ack?: boolean;
  deployment_id?: string;
  protocol_version?: number;
  child_invocation_id?: Buffer;
  child_service_type?: string;
  child_handler_type?: string;
  child_completion_retention_ms?: number;
  child_journal_retention_ms?: number;
}

export const Outcome = { END: 0, SUSPENDED: 1, FAILED: 2 } as const;
export const Then = { RETRY: 0, PAUSE: 1, FAIL: 2 } as const;

export interface AttemptEnded {
  invocation_id: Buffer;
  epoch: number;
  outcome: number;
  waiting_completions?: number[];
  waiting_signals?: number[];
  waiting_named_signals?: string[];
  error_code?: string;
  failure_code?: number;
  failure_message?: string;
  related_entry_index?: number;
  related_entry_name?: string;
  related_entry_type?: number;
  retry_at_ms?: number;
  then?: number;
  deployment_id?: string;
  protocol_version?: number;
  sdk_version?: string;
}

export interface TimerFired {
  invocation_id: Buffer;
  completion_id: number;
  wake_up_ms: number;
  kind?: number;
}

export const TimerKind = { SLEEP: 0, INVOKE: 1 } as const;

export interface FailureMsg {
  code: number;
  message: string;
  metadata?: Header[];
}

/** Exactly one of value / failure / void. */
export interface ResultMsg {
  value?: Buffer;
  failure?: FailureMsg;
  void?: boolean;
}

export interface CallResult extends ResultMsg {
  invocation_id: Buffer;
  completion_id: number;
  entry_type: number;
}

export interface Signal extends ResultMsg {
  invocation_id: Buffer;
  idx?: number;
  name?: string;
}

export interface OutboxDelivered {
  seq: number;
}

export const ManageAction = { CANCEL: 0, KILL: 1, PAUSE: 2, RESUME: 3 } as const;

export interface Manage {
  invocation_id: Buffer;
  action: number;
}

export interface Purge {
  invocation_id: Buffer;
  journal_only?: boolean;
}

export interface Attach {
  invocation_id: Buffer;
  waiter_invocation_id: Buffer;
  waiter_completion_id: number;
  entry_type: number;
}

export interface SetObjectState {
  service: string;
  key: string;
  entries?: Array<{ key: string; value?: Buffer }>;
}

export interface RetryAttempt {
  invocation_id: Buffer;
  epoch: number;
}

export type CommandKind =
  | { invoke: Invoke }
  | { journal_append: JournalAppend }
  | { attempt_ended: AttemptEnded }
  | { timer_fired: TimerFired }
  | { retry_attempt: RetryAttempt }
  | { call_result: CallResult }
  | { signal: Signal }
  | { outbox_delivered: OutboxDelivered }
  | { manage: Manage }
  | { purge: Purge }
  | { attach: Attach }
  | { set_object_state: SetObjectState };

export type Command = CommandKind & { timestamp_ms: number; source_partition?: number; source_seq?: number };

export function encodeCommand(cmd: Command): Buffer {
  const bytes = CommandType.encode(CommandType.fromObject(cmd)).finish();
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Decodes a log record; absent fields stay undefined (uint64 as number, bytes as Buffer). */
export function decodeCommand(bytes: Uint8Array): Command {
  return CommandType.toObject(CommandType.decode(bytes), { longs: Number, bytes: Buffer, defaults: false }) as Command;
}
