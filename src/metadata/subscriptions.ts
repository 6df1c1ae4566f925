// Subscriptions: ids, and the META0009 validation of a new subscription against the configured
// Kafka clusters and the registered services. Every handler Restate accepts is a valid sink: a
// plain service's, a virtual object's or a workflow's (its run handler included: each record
// key is a workflow id, and a key that already ran is not run again). Delivery is in
// `src/subscriptions`.

import { randomBytes } from 'node:crypto';
import type { KafkaCluster } from '../config/index.js';
import { KeelError } from '../errors/index.js';
import { kafkaConsumerSettings } from './kafka-options.js';
import type { HandlerSchema, ServiceSchema, SubscriptionRequest } from './types.js';

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';

/** Subscription ids: `sub_1` + 22 base62 characters of a random 128-bit value (as deployment ids). */
export function newSubscriptionId(): string {
  let v = 0n;
  for (const b of randomBytes(16)) v = (v << 8n) | BigInt(b);
  let out = '';
  while (v > 0n) {
    out = ALPHABET[Number(v % 62n)] + out;
    v /= 62n;
  }
  return `sub_1${out.padStart(22, '0')}`;
}

export function isSubscriptionId(text: string): boolean {
  return /^sub_1[0-9a-zA-Z]{22}$/.test(text);
}

function invalid(message: string): KeelError {
  return new KeelError('META0009', `invalid subscription: ${message}`);
}

/** `kafka://<cluster>/<topic>`, both parts non-empty, the topic a valid Kafka topic name. */
export function parseSource(source: string): { cluster: string; topic: string } {
  const m = /^kafka:\/\/([^/?#\s]+)\/([^/?#\s]+)$/.exec(source);
  if (!m) throw invalid(`the source '${source}' must have the form kafka://<cluster>/<topic>`);
  const topic = m[2]!;
  if (!/^[A-Za-z0-9._-]{1,249}$/.test(topic) || topic === '.' || topic === '..') {
    throw invalid(`the topic '${topic}' of source '${source}' is not a valid Kafka topic name (letters, digits, '.', '_', '-')`);
  }
  return { cluster: m[1]!, topic };
}

/** `service://<service>/<handler>`, both parts non-empty. */
export function parseSink(sink: string): { service: string; handler: string } {
  const m = /^service:\/\/([^/?#\s]+)\/([^/?#\s]+)$/.exec(sink);
  if (!m) throw invalid(`the sink '${sink}' must have the form service://<service>/<handler>`);
  return { service: m[1]!, handler: m[2]! };
}

/**
 * Checks a subscription request; returns its normalised fields or throws META0009 (400).
 * `lookup` finds a registered service by name.
 */
export function validateSubscription(
  req: SubscriptionRequest,
  clusters: KafkaCluster[],
  lookup: (service: string) => ServiceSchema | undefined,
): { source: string; sink: string; options: Record<string, string> } {
  if (typeof req.source !== 'string' || req.source === '') throw invalid('the field source is required and must be a string kafka://<cluster>/<topic>');
  if (typeof req.sink !== 'string' || req.sink === '') throw invalid('the field sink is required and must be a string service://<service>/<handler>');
  const { cluster } = parseSource(req.source);
  const kafkaCluster = clusters.find((c) => c.name === cluster);
  if (!kafkaCluster) {
    const known = clusters.map((c) => `'${c.name}'`).join(', ');
    throw invalid(
      `the Kafka cluster '${cluster}' of source '${req.source}' is not configured ` +
        `(configured: ${known || 'none'}); add it under [[ingress.kafka_clusters]] in the configuration`,
    );
  }
  const { service, handler } = parseSink(req.sink);
  const svc = lookup(service);
  if (!svc) throw invalid(`the sink service '${service}' is not registered; register a deployment that has it first`);
  const h: HandlerSchema | undefined = svc.handlers.find((x) => x.name === handler);
  if (!h) {
    throw invalid(
      `the sink service '${service}' has no handler '${handler}' ` + `(handlers: ${svc.handlers.map((x) => `'${x.name}'`).join(', ') || 'none'})`,
    );
  }
  let options: Record<string, string> = {};
  if (req.options !== undefined && req.options !== null) {
    if (typeof req.options !== 'object' || Array.isArray(req.options) || Object.values(req.options).some((v) => typeof v !== 'string')) {
      throw invalid('the field options must be an object mapping property names to string values');
    }
    options = { ...(req.options as Record<string, string>) };
  }
  // Refuses (META0009) any consumer property, of the options or of the cluster, Keel cannot honour.
  kafkaConsumerSettings(kafkaCluster, options, 'sub_1-not-yet-assigned');
  return { source: req.source, sink: req.sink, options };
}
