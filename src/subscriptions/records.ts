// Kafka records → the `subscription_records` command that makes their invocations. Everything the
// fold must not decide itself is decided here: which partition keeps the position, each record's
// invocation id (derived from its coordinates, so a record names one invocation whatever happens),
// where that invocation lives, the object key, and the headers.

import { InvocationId, deterministicUuid, objectPartitionKey, partitionKeyOf, workflowInvocationId } from '../common/ids.js';
import type { Header, SubscriptionRecord, SubscriptionRecords } from '../log/commands.js';
import type { ResolvedTarget } from '../metadata/targets.js';
import type { KafkaRecord } from './kafka-client.js';

/** Records per command: what one Kafka partition has in flight towards the log at most. */
export const MAX_RECORDS_PER_COMMAND = 500;
/** Bytes of values per command (a larger single record still goes, alone). */
export const MAX_BYTES_PER_COMMAND = 4 * 1024 * 1024;

/** The Keel partition key that keeps the position of one topic partition of a subscription. */
export function positionPartitionKey(subscription_id: string, topic: string, kafka_partition: number): bigint {
  return partitionKeyOf(`kafka\0${subscription_id}\0${topic}\0${kafka_partition}`);
}

/** The sink as the schema resolved it when the records were consumed. */
export interface Sink {
  service: string;
  handler: string;
  target: Pick<ResolvedTarget, 'service_type' | 'handler_type' | 'completion_retention_ms' | 'journal_retention_ms' | 'workflow_run'>;
}

/** Splits records, in order, into commands of bounded size. */
export function chunks(records: KafkaRecord[]): KafkaRecord[][] {
  const out: KafkaRecord[][] = [];
  let current: KafkaRecord[] = [];
  let bytes = 0;
  for (const r of records) {
    const size = (r.value?.length ?? 0) + (r.key?.length ?? 0);
    if (current.length > 0 && (current.length >= MAX_RECORDS_PER_COMMAND || bytes + size > MAX_BYTES_PER_COMMAND)) {
      out.push(current);
      current = [];
      bytes = 0;
    }
    current.push(r);
    bytes += size;
  }
  if (current.length > 0) out.push(current);
  return out;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The object key of a record for a keyed sink: its key as UTF-8 (none is the empty key, as in Restate). */
function objectKey(key: Buffer | null): string | undefined {
  if (key === null) return '';
  try {
    return utf8.decode(key);
  } catch {
    return undefined;
  }
}

/** Names Restate gives the record's coordinates; a record header may not pose as one of them. */
const RESERVED = new Set(['kafka.offset', 'kafka.topic', 'kafka.partition', 'kafka.timestamp', 'kafka.key', 'restate.subscription.id']);

/**
 * Restate's headers (coordinates, subscription, key as base64url), then the record's own headers
 * whose value is UTF-8 text (invocation headers are text) and whose name is not reserved.
 */
export function recordHeaders(subscription_id: string, r: KafkaRecord): Header[] {
  const out: Header[] = [
    { key: 'kafka.offset', value: String(r.offset) },
    { key: 'kafka.topic', value: r.topic },
    { key: 'kafka.partition', value: String(r.partition) },
  ];
  if (Number.isFinite(r.timestamp) && r.timestamp >= 0) out.push({ key: 'kafka.timestamp', value: String(r.timestamp) });
  out.push({ key: 'restate.subscription.id', value: subscription_id });
  if (r.key !== null) out.push({ key: 'kafka.key', value: r.key.toString('base64url') });
  for (const [name, value] of r.headers) {
    if (RESERVED.has(name.toLowerCase())) continue;
    try {
      out.push({ key: name, value: utf8.decode(value) });
    } catch {
      // Binary header values cannot travel as invocation headers; the record itself still does.
    }
  }
  return out;
}

/** The invocation id of a record: its coordinates name it; a workflow run is named by its key. */
export function recordInvocationId(subscription_id: string, sink: Sink, r: KafkaRecord, key: string, positionKey: bigint): InvocationId {
  if (sink.target.workflow_run) return workflowInvocationId(sink.service, key);
  const uuid = deterministicUuid('kafka', subscription_id, r.topic, String(r.partition), String(r.offset));
  // A plain service's invocations live with the position, so the batch makes them without the outbox.
  const pk = sink.target.service_type === 'Service' ? positionKey : objectPartitionKey(sink.service, key);
  return InvocationId.fromParts(pk, uuid);
}

/** What `build` reports about records it could not turn into invocations. */
export interface Skipped {
  offset: number;
  reason: string;
}

/**
 * The command for one chunk of records of one topic partition. `isLocal` says whether an
 * invocation id belongs to the partition the command is appended to.
 */
export function buildCommand(
  subscription_id: string,
  sink: Sink,
  records: KafkaRecord[],
  positionKey: bigint,
  isLocal: (id: InvocationId) => boolean,
  onSkipped: (s: Skipped) => void,
): SubscriptionRecords {
  const keyed = sink.target.service_type !== 'Service';
  const out: SubscriptionRecord[] = [];
  for (const r of records) {
    const key = keyed ? objectKey(r.key) : '';
    if (key === undefined) {
      const reason = `the record key is not valid UTF-8, so it cannot name a ${sink.target.service_type === 'Workflow' ? 'workflow' : 'virtual object'} of ${sink.service}`;
      onSkipped({ offset: r.offset, reason });
      out.push({ offset: r.offset, skipped: reason });
      continue;
    }
    const id = recordInvocationId(subscription_id, sink, r, key, positionKey);
    out.push({
      offset: r.offset,
      invocation_id: id.bytes,
      key,
      input: r.value ?? Buffer.alloc(0),
      headers: recordHeaders(subscription_id, r),
      local: isLocal(id),
    });
  }
  const first = records[0]!;
  return {
    subscription_id,
    topic: first.topic,
    kafka_partition: first.partition,
    service: sink.service,
    handler: sink.handler,
    service_type: sink.target.service_type,
    handler_type: sink.target.handler_type,
    completion_retention_ms: sink.target.completion_retention_ms,
    journal_retention_ms: sink.target.journal_retention_ms,
    records: out,
  };
}
