// The librdkafka-style properties a subscription may carry (its `options`, over the properties of
// its `[[ingress.kafka_clusters]]` entry, as Restate merges them) mapped onto client-neutral
// consumer settings that every Kafka client behind `src/subscriptions/kafka-client.ts` honours.
// A property Keel cannot honour is refused with META0009 naming it, at `POST /subscriptions`.
//
// It lives in `metadata` (not `subscriptions`) because subscription validation uses it and
// imports point down the layers.

import fs from 'node:fs';
import { KeelError } from '../errors/index.js';

export interface KafkaTls {
  /** PEM CA certificates; undefined = Node's default CAs (librdkafka's `probe`). */
  ca?: string[];
  cert?: string;
  key?: string;
  passphrase?: string;
  /** `enable.ssl.certificate.verification` */
  rejectUnauthorized: boolean;
  /** `ssl.endpoint.identification.algorithm=https` */
  checkServerIdentity: boolean;
}

export interface KafkaSasl {
  mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512';
  username: string;
  password: string;
}

/** What a consumer of one subscription needs, whatever the client library. */
export interface KafkaConsumerSettings {
  brokers: string[];
  clientId: string;
  groupId: string;
  /** Where a partition starts when neither Keel nor the group has a position. */
  autoOffsetReset: 'earliest' | 'latest';
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  /** librdkafka sends `max.poll.interval.ms` as the JoinGroup rebalance timeout. */
  rebalanceTimeoutMs: number;
  requestTimeoutMs: number;
  connectionTimeoutMs: number;
  retryBackoffMs: number;
  retryBackoffMaxMs: number;
  fetchMaxWaitMs: number;
  fetchMinBytes: number;
  fetchMaxBytes: number;
  maxPartitionFetchBytes: number;
  metadataMaxAgeMs: number;
  readCommitted: boolean;
  allowAutoTopicCreation: boolean;
  /** How often positions are committed to Kafka, for visibility only. */
  commitIntervalMs: number;
  rackId?: string;
  tls?: KafkaTls;
  sasl?: KafkaSasl;
  /** Properties accepted and ignored (as Restate ignores them), for a warning. */
  ignored: string[];
}

/** Accepted for compatibility and ignored: Keel owns positions and commits, and its own logging. */
const IGNORED = new Set([
  'enable.auto.commit',
  'enable.auto.offset.store',
  'debug',
  'log_level',
  'log.connection.close',
  'statistics.interval.ms',
  'api.version.request',
  'enable.partition.eof',
  'check.crcs',
]);

/** Integer properties: librdkafka's name, its range and default, and the setting it feeds. */
const INTS: Record<string, { min: number; max: number; dflt: number; to: keyof IntSettings }> = {
  'session.timeout.ms': { min: 1, max: 3_600_000, dflt: 45_000, to: 'sessionTimeoutMs' },
  'heartbeat.interval.ms': { min: 1, max: 3_600_000, dflt: 3_000, to: 'heartbeatIntervalMs' },
  'max.poll.interval.ms': { min: 1, max: 86_400_000, dflt: 300_000, to: 'rebalanceTimeoutMs' },
  'socket.timeout.ms': { min: 10, max: 300_000, dflt: 60_000, to: 'requestTimeoutMs' },
  'socket.connection.setup.timeout.ms': { min: 1_000, max: 2_147_483_647, dflt: 30_000, to: 'connectionTimeoutMs' },
  'reconnect.backoff.ms': { min: 0, max: 3_600_000, dflt: 100, to: 'retryBackoffMs' },
  'reconnect.backoff.max.ms': { min: 0, max: 3_600_000, dflt: 10_000, to: 'retryBackoffMaxMs' },
  'fetch.wait.max.ms': { min: 0, max: 300_000, dflt: 500, to: 'fetchMaxWaitMs' },
  'fetch.min.bytes': { min: 1, max: 100_000_000, dflt: 1, to: 'fetchMinBytes' },
  'fetch.max.bytes': { min: 0, max: 2_147_483_135, dflt: 52_428_800, to: 'fetchMaxBytes' },
  'max.partition.fetch.bytes': { min: 1, max: 1_000_000_000, dflt: 1_048_576, to: 'maxPartitionFetchBytes' },
  'topic.metadata.refresh.interval.ms': { min: 1, max: 3_600_000, dflt: 300_000, to: 'metadataMaxAgeMs' },
  'auto.commit.interval.ms': { min: 1, max: 86_400_000, dflt: 5_000, to: 'commitIntervalMs' },
};

/** Other properties this module reads; anything neither here, in INTS nor in IGNORED is refused. */
const OTHERS = new Set([
  'bootstrap.servers',
  'metadata.broker.list',
  'group.id',
  'client.id',
  'auto.offset.reset',
  'isolation.level',
  'allow.auto.create.topics',
  'partition.assignment.strategy',
  'group.protocol',
  'client.rack',
  'security.protocol',
  'sasl.mechanism',
  'sasl.mechanisms',
  'sasl.username',
  'sasl.password',
  'ssl.ca.location',
  'ssl.ca.pem',
  'ssl.certificate.location',
  'ssl.certificate.pem',
  'ssl.key.location',
  'ssl.key.pem',
  'ssl.key.password',
  'enable.ssl.certificate.verification',
  'ssl.endpoint.identification.algorithm',
]);

const BROKER = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):\d{1,5}$/;

/**
 * Maps a subscription's consumer properties onto settings, or throws META0009 (400) naming the
 * first property that cannot be honoured and where it came from. `subscriptionOptions` take
 * precedence over `clusterProperties`, as in Restate. The consumer group defaults to the
 * subscription id (Restate: subscription options > cluster properties > subscription id), the
 * client id to `restate` (what Restate sets when neither gives one).
 */
export function kafkaConsumerSettings(
  cluster: { name: string; properties: Record<string, string> },
  subscriptionOptions: Record<string, string>,
  subscriptionId: string,
): KafkaConsumerSettings {
  const p = new Props(cluster, subscriptionOptions);
  const ignored = p.names().filter((name) => IGNORED.has(name));
  for (const name of p.names()) {
    if (!IGNORED.has(name) && !(name in INTS) && !OTHERS.has(name)) throw p.refuse(name, 'is not supported by Keel (unknown to it, or a producer-only property)');
  }
  // Read in this order, so that of several faults the same one is named first whatever changes here.
  const brokers = brokersOf(p);
  const ints = intsOf(p);
  const groupId = p.get('group.id') ?? subscriptionId;
  if (groupId.trim() === '') throw p.refuse('group.id', 'must not be empty');
  const autoOffsetReset = offsetResetOf(p);
  const readCommitted = readCommittedOf(p);
  const allowAutoTopicCreation = p.bool('allow.auto.create.topics', false);
  checkGroupProtocol(p);
  const security = (p.get('security.protocol') ?? 'plaintext').toLowerCase();
  if (!['plaintext', 'ssl', 'sasl_plaintext', 'sasl_ssl'].includes(security)) {
    throw p.refuse('security.protocol', 'must be one of plaintext, ssl, sasl_plaintext, sasl_ssl');
  }
  const tls = tlsOf(p, security);
  const sasl = saslOf(p, security);
  const rack = p.get('client.rack');
  return {
    brokers,
    clientId: p.get('client.id') ?? 'restate',
    groupId,
    autoOffsetReset,
    ...ints,
    readCommitted,
    allowAutoTopicCreation,
    ...(rack !== undefined ? { rackId: rack } : {}),
    ...(tls ? { tls } : {}),
    ...(sasl ? { sasl } : {}),
    ignored,
  };
}

/** The merged properties, each with where it came from, for the refusals to name. */
class Props {
  private readonly merged = new Map<string, { value: string; from: string }>();

  constructor(cluster: { name: string; properties: Record<string, string> }, subscriptionOptions: Record<string, string>) {
    for (const [k, v] of Object.entries(cluster.properties)) this.merged.set(k, { value: String(v), from: `the properties of Kafka cluster '${cluster.name}'` });
    for (const [k, v] of Object.entries(subscriptionOptions)) this.merged.set(k, { value: String(v), from: "the subscription's options" });
    // librdkafka aliases: the later spelling wins as the alias table in librdkafka does.
    alias(this.merged, 'metadata.broker.list', 'bootstrap.servers');
    alias(this.merged, 'sasl.mechanisms', 'sasl.mechanism');
  }

  names(): string[] {
    return [...this.merged.keys()];
  }

  has(name: string): boolean {
    return this.merged.has(name);
  }

  get(name: string): string | undefined {
    return this.merged.get(name)?.value;
  }

  refuse(name: string, why: string): KeelError {
    const e = this.merged.get(name);
    const shown = e ? `'${name}' = '${e.value}' (from ${e.from})` : `'${name}'`;
    return new KeelError('META0009', `invalid subscription: the Kafka consumer option ${shown} ${why}`);
  }

  bool(name: string, dflt: boolean): boolean {
    const v = this.get(name);
    if (v === undefined) return dflt;
    if (v === 'true' || v === '1') return true;
    if (v === 'false' || v === '0') return false;
    throw this.refuse(name, "must be 'true' or 'false'");
  }
}

function brokersOf(p: Props): string[] {
  const bootstrap = p.get('bootstrap.servers');
  if (bootstrap === undefined) throw p.refuse('bootstrap.servers', "is required: set the cluster's brokers");
  const brokers = bootstrap.split(',').map((b) => b.trim()).filter((b) => b !== '');
  if (brokers.length === 0 || brokers.some((b) => !BROKER.test(b))) throw p.refuse('bootstrap.servers', 'must be a comma-separated list of host:port');
  return brokers;
}

type IntSettings = Pick<
  KafkaConsumerSettings,
  | 'sessionTimeoutMs' | 'heartbeatIntervalMs' | 'rebalanceTimeoutMs' | 'requestTimeoutMs' | 'connectionTimeoutMs' | 'retryBackoffMs'
  | 'retryBackoffMaxMs' | 'fetchMaxWaitMs' | 'fetchMinBytes' | 'fetchMaxBytes' | 'maxPartitionFetchBytes' | 'metadataMaxAgeMs' | 'commitIntervalMs'
>;

function intsOf(p: Props): IntSettings {
  const ints = {} as Record<string, number>;
  for (const [name, spec] of Object.entries(INTS)) {
    const raw = p.get(name);
    if (raw === undefined) {
      ints[spec.to] = spec.dflt;
      continue;
    }
    if (!/^-?\d+$/.test(raw.trim())) throw p.refuse(name, 'must be an integer');
    const n = Number(raw.trim());
    if (n < spec.min || n > spec.max) throw p.refuse(name, `must be between ${spec.min} and ${spec.max}`);
    ints[spec.to] = n;
  }
  if (ints.heartbeatIntervalMs! >= ints.sessionTimeoutMs!) {
    throw p.refuse('heartbeat.interval.ms', `must be lower than session.timeout.ms (${ints.sessionTimeoutMs})`);
  }
  if (ints.retryBackoffMaxMs! < ints.retryBackoffMs!) {
    throw p.refuse('reconnect.backoff.max.ms', `must not be lower than reconnect.backoff.ms (${ints.retryBackoffMs})`);
  }
  return ints as unknown as IntSettings;
}

function offsetResetOf(p: Props): 'earliest' | 'latest' {
  const reset = p.get('auto.offset.reset');
  if (reset === undefined) return 'latest';
  if (['earliest', 'smallest', 'beginning'].includes(reset)) return 'earliest';
  if (['latest', 'largest', 'end'].includes(reset)) return 'latest';
  if (reset === 'error') throw p.refuse('auto.offset.reset', "cannot be honoured: Keel needs a starting position; use 'earliest' or 'latest'");
  throw p.refuse('auto.offset.reset', "must be 'earliest' or 'latest' (or their aliases smallest/beginning, largest/end)");
}

function readCommittedOf(p: Props): boolean {
  const iso = p.get('isolation.level');
  if (iso === undefined || iso === 'read_committed') return true;
  if (iso === 'read_uncommitted') return false;
  throw p.refuse('isolation.level', "must be 'read_committed' or 'read_uncommitted'");
}

function checkGroupProtocol(p: Props): void {
  const strategy = p.get('partition.assignment.strategy');
  // The clients behind Keel assign round-robin; librdkafka's default list includes it.
  if (strategy !== undefined && !strategy.split(',').map((s) => s.trim()).includes('roundrobin')) {
    throw p.refuse('partition.assignment.strategy', "cannot be honoured: Keel's consumer assigns partitions round-robin; use 'roundrobin' (or the default 'range,roundrobin')");
  }
  const protocol = p.get('group.protocol');
  if (protocol !== undefined && protocol !== 'classic') {
    throw p.refuse('group.protocol', "cannot be honoured: Keel's consumer speaks the classic group protocol only");
  }
}

function tlsOf(p: Props, security: string): KafkaTls | undefined {
  if (security !== 'ssl' && security !== 'sasl_ssl') {
    for (const name of p.names()) {
      if (name.startsWith('ssl.') || name === 'enable.ssl.certificate.verification') {
        throw p.refuse(name, `has no effect with security.protocol '${security}'; use ssl or sasl_ssl`);
      }
    }
    return undefined;
  }
  const pem = (locName: string, pemName: string): string | undefined => {
    const inline = p.get(pemName);
    if (inline !== undefined) return inline;
    const loc = p.get(locName);
    if (loc === undefined || (locName === 'ssl.ca.location' && loc === 'probe')) return undefined;
    try {
      return fs.readFileSync(loc, 'utf8');
    } catch (err) {
      throw p.refuse(locName, `names a file Keel cannot read: ${(err as Error).message}`);
    }
  };
  const ca = pem('ssl.ca.location', 'ssl.ca.pem');
  const algo = p.get('ssl.endpoint.identification.algorithm') ?? 'https';
  if (algo !== 'https' && algo !== 'none') throw p.refuse('ssl.endpoint.identification.algorithm', "must be 'https' or 'none'");
  const cert = pem('ssl.certificate.location', 'ssl.certificate.pem');
  const key = pem('ssl.key.location', 'ssl.key.pem');
  const passphrase = p.get('ssl.key.password');
  return {
    ...(ca !== undefined ? { ca: [ca] } : {}),
    ...(cert !== undefined ? { cert } : {}),
    ...(key !== undefined ? { key } : {}),
    ...(passphrase !== undefined ? { passphrase } : {}),
    rejectUnauthorized: p.bool('enable.ssl.certificate.verification', true),
    checkServerIdentity: algo === 'https',
  };
}

function saslOf(p: Props, security: string): KafkaSasl | undefined {
  if (security !== 'sasl_plaintext' && security !== 'sasl_ssl') {
    for (const name of ['sasl.mechanism', 'sasl.username', 'sasl.password']) {
      if (p.has(name)) throw p.refuse(name, `has no effect with security.protocol '${security}'; use sasl_plaintext or sasl_ssl`);
    }
    return undefined;
  }
  const mech = (p.get('sasl.mechanism') ?? 'GSSAPI').toUpperCase();
  const mechanism = ({ PLAIN: 'plain', 'SCRAM-SHA-256': 'scram-sha-256', 'SCRAM-SHA-512': 'scram-sha-512' } as const)[mech as 'PLAIN'];
  if (!mechanism) {
    throw p.refuse('sasl.mechanism', `cannot be honoured: ${mech}${p.get('sasl.mechanism') === undefined ? " (librdkafka's default)" : ''} is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`);
  }
  const username = p.get('sasl.username');
  const password = p.get('sasl.password');
  if (username === undefined) throw p.refuse('sasl.username', `is required with sasl.mechanism ${mech}`);
  if (password === undefined) throw p.refuse('sasl.password', `is required with sasl.mechanism ${mech}`);
  return { mechanism, username, password };
}

/** Folds `from` into `to` (librdkafka treats them as one property). */
function alias(m: Map<string, { value: string; from: string }>, from: string, to: string): void {
  const a = m.get(from);
  if (!a) return;
  m.delete(from);
  if (!m.has(to) || a.from.startsWith('the subscription')) m.set(to, a);
}
