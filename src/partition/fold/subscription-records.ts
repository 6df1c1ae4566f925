import { assert } from '../../common/assert.js';
import type { Invoke, SubscriptionRecords } from '../../log/commands.js';
import { idOf, sendTo, type FoldContext } from './context.js';
import { foldInvoke } from './invoke.js';

/**
 * Records a subscription consumed from one Kafka partition: the stored position moves past
 * them and each record becomes its invocation, here or through the outbox, in the same batch.
 * Records below the stored position already have theirs (a redelivery after a crash or a
 * rebalance) and are dropped, so each record makes one invocation, whatever Kafka redelivers.
 */
export function foldSubscriptionRecords(ctx: FoldContext, cmd: SubscriptionRecords): void {
  const subscription_id = cmd.subscription_id ?? '';
  const topic = cmd.topic ?? '';
  const kafka_partition = cmd.kafka_partition ?? 0;
  assert(subscription_id !== '' && topic !== '', () => 'subscription_records without a subscription or a topic');
  const before = ctx.state.subscriptionPosition(subscription_id, topic, kafka_partition);
  let next_offset = before?.next_offset ?? 0;
  let delivered = before?.delivered ?? 0;
  let skipped = before?.skipped ?? 0;
  let last = -1;
  for (const r of cmd.records ?? []) {
    const offset = r.offset ?? 0;
    assert(offset > last, () => `subscription_records of ${subscription_id} ${topic}/${kafka_partition}: offset ${offset} after ${last}`);
    last = offset;
    if (before !== undefined && offset < before.next_offset) continue;
    next_offset = offset + 1;
    if (r.skipped) {
      skipped += 1;
      continue;
    }
    delivered += 1;
    const id = idOf(r.invocation_id, 'subscription record');
    const invoke: Invoke = {
      invocation_id: id.bytes,
      service: cmd.service ?? '',
      handler: cmd.handler ?? '',
      key: r.key ?? '',
      input: r.input ?? Buffer.alloc(0),
      headers: r.headers ?? [],
      service_type: cmd.service_type ?? 'Service',
      handler_type: cmd.handler_type ?? '',
      completion_retention_ms: cmd.completion_retention_ms ?? 0,
      journal_retention_ms: cmd.journal_retention_ms ?? 0,
      invoked_by_subscription_id: subscription_id,
    };
    if (r.local) foldInvoke(ctx, invoke);
    else sendTo(ctx, id.text, { kind: 'invoke', invoke });
  }
  if (before !== undefined && next_offset === before.next_offset) return;
  ctx.state.putSubscriptionPosition({ subscription_id, topic, kafka_partition, next_offset, delivered, skipped, updated_at_ms: ctx.now_ms });
}
