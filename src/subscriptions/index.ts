// Kafka consumers for subscriptions, behind Keel's own interface (`kafka-client.ts`).

import type { KafkaConsumerSettings } from '../metadata/kafka-options.js';
import type { KafkaConsumer, KafkaConsumerHandlers } from './kafka-client.js';
import { KafkajsConsumer } from './kafkajs-client.js';
import { PlatformaticConsumer } from './platformatic-client.js';

export type { KafkaConsumer, KafkaConsumerHandlers, KafkaRecord, PartitionLag } from './kafka-client.js';

/** `kafkajs` is the one verified against a Kafka wire protocol (see the README of this folder's tests). */
export type KafkaLibrary = 'kafkajs' | 'platformatic';

export function createKafkaConsumer(
  library: KafkaLibrary,
  settings: KafkaConsumerSettings,
  topic: string,
  handlers: KafkaConsumerHandlers,
): KafkaConsumer {
  if (library === 'kafkajs') return new KafkajsConsumer(settings, topic, handlers);
  return new PlatformaticConsumer(settings, topic, handlers);
}
