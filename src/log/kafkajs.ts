// kafkajs, loaded on first use (~100 ms of CPU: a server without Kafka never loads it), and the
// retries Keel's Kafka clients share.
import { createRequire } from 'node:module';
import type * as Kafkajs from 'kafkajs';

let kafkajs: typeof Kafkajs | undefined;
export const loadKafkajs = (): typeof Kafkajs => (kafkajs ??= createRequire(import.meta.url)('kafkajs') as typeof Kafkajs);

/** Retries of one Kafka request of the cluster's clients: ~15 s at most 500 ms apart (a broker failing over answers NOT_LEADER until it has moved). */
export const KAFKA_RETRY = { initialRetryTime: 100, maxRetryTime: 500, retries: 30 };
