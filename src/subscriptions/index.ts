// Kafka consumers for subscriptions, behind Keel's own interface (`kafka-client.ts`). kafkajs is
// the one implementation: @platformatic/kafka was measured against it and dropped (it needs
// Kafka >= 3.5 and refused librdkafka's mock cluster, the only broker the tests have; it has no
// per-partition pause or seek, and keeps one value per header name).

import type { KafkaConsumerSettings } from '../metadata/kafka-options.js';
import type { KafkaConsumer, KafkaConsumerHandlers } from './kafka-client.js';
import { KafkajsConsumer } from './kafkajs-client.js';

export type { KafkaConsumer, KafkaConsumerHandlers, KafkaRecord, PartitionLag } from './kafka-client.js';

export function createKafkaConsumer(settings: KafkaConsumerSettings, topic: string, handlers: KafkaConsumerHandlers): KafkaConsumer {
  return new KafkajsConsumer(settings, topic, handlers);
}
