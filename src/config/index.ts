import { readFileSync } from 'node:fs';
import { availableParallelism, hostname } from 'node:os';
import { join, resolve as resolvePath } from 'node:path';
import { parse as parseToml, TomlError } from 'smol-toml';
import { KeelError } from '../errors/index.js';
import { parseDuration_ms, parseSize_bytes } from '../common/units.js';

export interface RetryPolicy {
  initial_interval_ms: number;
  exponentiation_factor: number;
  max_interval_ms: number;
  /** Attempts in all, the first one included; undefined is unlimited. */
  max_attempts: number | undefined;
  on_max_attempts: 'pause' | 'kill';
}

/** A Kafka cluster subscriptions may read from (`[[ingress.kafka_clusters]]`). */
export interface KafkaCluster {
  name: string;
  brokers: string[];
  /** librdkafka-style properties: `bootstrap.servers` from `brokers`, plus every other key given. */
  properties: Record<string, string>;
}

/**
 * A schedule declared in the configuration (`[[schedules]]`): its fields as PUT /schedules/{name}
 * takes them, checked against the registered services when it is applied.
 */
export interface ConfiguredSchedule {
  name: string;
  body: Record<string, unknown>;
}

/** SQL introspection (`POST /query` and the PostgreSQL wire on 9071), run in a child process. */
export interface QueryEngineConfig {
  pgsql_bind_address: string;
  /** Password psql and other PostgreSQL clients must give on 9071; undefined: none asked. */
  pgsql_password: string | undefined;
  /** A query still running after this is cancelled (KEEL0021, 408). */
  query_timeout_ms: number;
  /** A query answering more rows than this is cancelled (KEEL0022). */
  max_result_rows: number;
  /** A query answering more bytes than this, or reading more into the engine, is cancelled (KEEL0022). */
  max_result_bytes: number;
  /** The engine's memory budget (DuckDB's buffer manager; past it, work spills to disk or fails). */
  memory_limit_bytes: number;
  /** Threads DuckDB may use for one query. */
  threads: number;
  /**
   * Statuses written lately whose rows the query engine's copy finds by rowid; past this many they
   * are forgotten, and a later change to one is searched for by id (once).
   */
  recent_statuses: number;
  /** The copy gets an index on id when it holds at most this many statuses, and loses it past 1.25 times that (DuckDB keeps an index in memory whole); 0: never. */
  indexed_statuses: number;
  /**
   * An engine without a query for this long stops, its copy with it, and the next query starts it
   * again (and waits for its copy); 0: it starts with the server and never stops.
   */
  idle_timeout_ms: number;
}

/** Limits and timeouts of the ingress and admin HTTP servers (`[http]`): slow or idle clients cannot hold them. */
export interface HttpLimits {
  /** A connection with no request in flight is closed after this long without a byte. */
  idle_timeout_ms: number;
  /** Time to receive a request's headers, from its first byte. */
  header_timeout_ms: number;
  /** Time to receive a whole request, body included. */
  request_timeout_ms: number;
  /** Connections per server; more are closed at once. */
  max_connections: number;
  /** Request line and header section together, in bytes. */
  max_header_size_bytes: number;
  max_header_count: number;
}

export interface Config {
  base_dir: string;
  /** Schedules kept as the configuration declares them (created, changed, and deleted when removed from it). */
  schedules: ConfiguredSchedule[];
  ingress: {
    bind_address: string;
    kafka_clusters: KafkaCluster[];
    request_size_limit_bytes: number;
    /** Bearer tokens any of which opens the ingress; empty = open. */
    auth_tokens: string[];
    /** Per subscription: past this many invocations not completed, its consumer pauses. */
    kafka_max_pending_invocations: number;
  };
  admin: { bind_address: string; auth_tokens: string[]; discovery_timeout_ms: number; query_engine: QueryEngineConfig };
  http: HttpLimits;
  meta: { storage_path: string };
  worker: {
    partitions: number;
    /** Threads serving partitions (issue 23): 1 is the main thread alone; 'auto' in the configuration is the cores this process may use. */
    threads: number;
    storage_db: {
      path: string;
      fsync: boolean;
      log_retained_records: number;
      /** Object state kept in memory, all partitions together (split evenly); the rest is read from the store. */
      state_cache_size_bytes: number;
      /** The store's own cache of uncompressed blocks (LevelDB's block cache). */
      block_cache_size_bytes: number;
      /** Table files LevelDB keeps open, each with its index and bloom filter in memory (its table cache). */
      max_open_files: number;
      /** Writes LevelDB gathers in memory before it writes them to a table file (its write buffer; two can be held at once). */
      write_buffer_size_bytes: number;
    };
    invoker: {
      inactivity_timeout_ms: number;
      abort_timeout_ms: number;
      message_size_limit_bytes: number;
      concurrent_invocations_limit: number;
      /** TCP (and TLS) connect to an endpoint, for discovery and invocations. */
      connect_timeout_ms: number;
      /** ed25519 private key (PKCS#8 PEM) that signs every request to endpoints; unset = unsigned. */
      request_identity_private_key_pem_file: string | undefined;
      /** Validity of a signature either side of its issue time. */
      request_identity_expiration_ms: number;
      /** Start messages carry no object state (every read is a lazy round trip), as Restate's option of that name. */
      disable_eager_state: boolean;
    };
    cleanup_interval_ms: number;
    /** Durable timers held in memory per partition; the rest are read from the store as these fire. */
    num_timers_in_memory_limit: number;
  };
  default_retry_policy: RetryPolicy;
  default_journal_retention_ms: number;
  /** Upper bound of any journal retention (manifest or default); undefined = no bound. RT0022 when clamped. */
  max_journal_retention_ms: number | undefined;
  default_idempotency_retention_ms: number;
  default_workflow_completion_retention_ms: number;
  log: { level: string; format: 'pretty' | 'json' | 'auto' };
  /** OTLP/HTTP receiver of traces; undefined: tracing is off. */
  tracing: { endpoint: string | undefined };
  /** Partition logs and metadata in Apache Kafka; undefined (no cluster.brokers): the embedded log, one node. */
  cluster: ClusterConfig | undefined;
}

export interface ClusterConfig {
  /** This node's name, unique in the cluster: its announcements and Kafka client id carry it. */
  node_name: string;
  /** Where the other nodes reach this one (its ingress and admin ports on this host). */
  advertised_host: string;
  /** A node that stops heartbeating leaves the cluster after this long (the brokers' group.min/max.session.timeout.ms bound it). */
  session_timeout_ms: number;
  brokers: string[];
  /** The partition logs' topic (one Kafka partition per Keel partition); the metadata is `<log_topic>-meta`. */
  log_topic: string;
  replication_factor: number;
  min_insync_replicas: number;
  /** Every append in a Kafka transaction as well as behind the epochs (slower: see README). */
  transactional: boolean;
  /** The partitions shared out among the nodes (each leads some; the default); false: one node leads them all, the others stand by. */
  spread_partitions: boolean;
  /** A directory every node shares for snapshots of the partitions; undefined: no snapshots, and the Kafka log is never trimmed. */
  snapshot_path: string | undefined;
  /** A partition's leader snapshots it each time it has applied this many records since the last snapshot. */
  snapshot_interval_records: number;
  /** Snapshots kept per partition; the Kafka log is trimmed below the oldest of them. */
  snapshots_kept: number;
  /**
   * The cluster's own bearer tokens (`cluster.auth_token[_file]`): the nodes' requests to each
   * other carry the first, and `POST /cluster/append` takes nothing else. Empty: node-to-node
   * requests carry the client's token (forwarded) or the first admin token (appends).
   */
  auth_tokens: string[];
}

type Kind = 'string' | 'url' | 'address' | 'duration' | 'timeout' | 'size' | 'int' | 'count' | 'number' | 'bool' | 'attempts' | 'on_max' | 'log_format' | 'threads';

/** Every key the file and the KEEL_ variables may set: path, kind, where it lands, default. */
const schema: Array<{ path: string; kind: Kind; dflt: unknown }> = [
  { path: 'base_dir', kind: 'string', dflt: './keel-data' },
  { path: 'ingress.bind_address', kind: 'address', dflt: '0.0.0.0:8080' },
  { path: 'ingress.request_size_limit', kind: 'size', dflt: 32 * 1024 * 1024 },
  { path: 'ingress.auth_token', kind: 'string', dflt: undefined },
  { path: 'ingress.auth_token_file', kind: 'string', dflt: undefined },
  { path: 'ingress.kafka_max_pending_invocations', kind: 'int', dflt: 10_000 },
  { path: 'admin.bind_address', kind: 'address', dflt: '0.0.0.0:9070' },
  { path: 'admin.auth_token', kind: 'string', dflt: undefined },
  { path: 'admin.auth_token_file', kind: 'string', dflt: undefined },
  { path: 'admin.discovery_timeout', kind: 'timeout', dflt: 10_000 },
  { path: 'http.idle_timeout', kind: 'timeout', dflt: 60_000 },
  { path: 'http.header_timeout', kind: 'timeout', dflt: 10_000 },
  { path: 'http.request_timeout', kind: 'timeout', dflt: 300_000 },
  { path: 'http.max_connections', kind: 'int', dflt: 10_000 },
  { path: 'http.max_header_size', kind: 'size', dflt: 64 * 1024 },
  { path: 'http.max_header_count', kind: 'int', dflt: 200 },
  { path: 'admin.query_engine.pgsql_bind_address', kind: 'address', dflt: '0.0.0.0:9071' },
  { path: 'admin.query_engine.pgsql_password', kind: 'string', dflt: undefined },
  { path: 'admin.query_engine.query_timeout', kind: 'duration', dflt: 30_000 },
  { path: 'admin.query_engine.max_result_rows', kind: 'int', dflt: 1_000_000 },
  { path: 'admin.query_engine.max_result_bytes', kind: 'size', dflt: 64 * 1024 * 1024 },
  { path: 'admin.query_engine.memory_limit', kind: 'size', dflt: 256 * 1024 * 1024 },
  { path: 'admin.query_engine.threads', kind: 'int', dflt: 2 },
  { path: 'admin.query_engine.recent_statuses', kind: 'int', dflt: 65_536 },
  { path: 'admin.query_engine.indexed_statuses', kind: 'count', dflt: 1_000_000 },
  { path: 'admin.query_engine.idle_timeout', kind: 'timeout', dflt: 600_000 },
  { path: 'meta.storage_path', kind: 'string', dflt: undefined },
  { path: 'worker.partitions', kind: 'int', dflt: 8 },
  { path: 'worker.threads', kind: 'threads', dflt: 'auto' },
  { path: 'worker.storage_db.path', kind: 'string', dflt: undefined },
  { path: 'worker.storage_db.fsync', kind: 'bool', dflt: true },
  { path: 'worker.storage_db.log_retained_records', kind: 'count', dflt: 100_000 },
  { path: 'worker.storage_db.state_cache_size', kind: 'size', dflt: 128 * 1024 * 1024 },
  { path: 'worker.storage_db.block_cache_size', kind: 'size', dflt: 64 * 1024 * 1024 },
  { path: 'worker.storage_db.max_open_files', kind: 'int', dflt: 200 },
  { path: 'worker.storage_db.write_buffer_size', kind: 'size', dflt: 32 * 1024 * 1024 },
  { path: 'worker.invoker.inactivity_timeout', kind: 'timeout', dflt: 60_000 },
  { path: 'worker.invoker.abort_timeout', kind: 'timeout', dflt: 600_000 },
  { path: 'worker.invoker.message_size_limit', kind: 'size', dflt: 32 * 1024 * 1024 },
  { path: 'worker.invoker.concurrent_invocations_limit', kind: 'int', dflt: 1000 },
  { path: 'worker.invoker.connect_timeout', kind: 'timeout', dflt: 5_000 },
  { path: 'worker.invoker.request_identity_private_key_pem_file', kind: 'string', dflt: undefined },
  { path: 'worker.invoker.request_identity_expiration', kind: 'timeout', dflt: 60_000 },
  { path: 'worker.invoker.disable_eager_state', kind: 'bool', dflt: false },
  { path: 'worker.cleanup_interval', kind: 'duration', dflt: 3_600_000 },
  { path: 'worker.num_timers_in_memory_limit', kind: 'int', dflt: 1_000 },
  { path: 'default_retry_policy.initial_interval', kind: 'duration', dflt: 500 },
  { path: 'default_retry_policy.exponentiation_factor', kind: 'number', dflt: 2 },
  { path: 'default_retry_policy.max_interval', kind: 'duration', dflt: 60_000 },
  { path: 'default_retry_policy.max_attempts', kind: 'attempts', dflt: 70 },
  { path: 'default_retry_policy.on_max_attempts', kind: 'on_max', dflt: 'pause' },
  { path: 'default_journal_retention', kind: 'duration', dflt: 86_400_000 },
  { path: 'max_journal_retention', kind: 'duration', dflt: undefined },
  { path: 'default_idempotency_retention', kind: 'duration', dflt: 86_400_000 },
  { path: 'default_workflow_completion_retention', kind: 'duration', dflt: 86_400_000 },
  { path: 'log.level', kind: 'string', dflt: 'info' },
  { path: 'log.format', kind: 'log_format', dflt: 'auto' },
  { path: 'tracing.endpoint', kind: 'url', dflt: undefined },
  { path: 'cluster.brokers', kind: 'string', dflt: undefined },
  { path: 'cluster.node_name', kind: 'string', dflt: undefined },
  { path: 'cluster.advertised_host', kind: 'string', dflt: undefined },
  { path: 'cluster.session_timeout', kind: 'timeout', dflt: 6_000 },
  { path: 'cluster.log_topic', kind: 'string', dflt: 'keel-log' },
  { path: 'cluster.replication_factor', kind: 'int', dflt: 3 },
  { path: 'cluster.min_insync_replicas', kind: 'int', dflt: 2 },
  { path: 'cluster.transactional', kind: 'bool', dflt: false },
  { path: 'cluster.spread_partitions', kind: 'bool', dflt: true },
  { path: 'cluster.snapshot_path', kind: 'string', dflt: undefined },
  { path: 'cluster.snapshot_interval_records', kind: 'int', dflt: 100_000 },
  { path: 'cluster.snapshots_kept', kind: 'int', dflt: 2 },
  { path: 'cluster.auth_token', kind: 'string', dflt: undefined },
  { path: 'cluster.auth_token_file', kind: 'string', dflt: undefined },
];

const ENV_PREFIX = 'KEEL_';
const MAX_TIMER_MS = 2 ** 31 - 1;

function envName(path: string): string {
  return ENV_PREFIX + path.split('.').map((p) => p.toUpperCase()).join('__');
}

function coerce(kind: Kind, raw: unknown): { ok: true; value: unknown } | { ok: false; why: string } {
  const text = typeof raw === 'string' ? raw : undefined;
  switch (kind) {
    case 'string':
      return text !== undefined && text.length > 0 ? { ok: true, value: text } : { ok: false, why: 'expected a non-empty string' };
    case 'url': {
      const url = text !== undefined && URL.canParse(text) ? new URL(text) : undefined;
      return url !== undefined && (url.protocol === 'http:' || url.protocol === 'https:')
        ? { ok: true, value: text }
        : { ok: false, why: 'expected an http:// or https:// URL such as "http://localhost:4318"' };
    }
    case 'address': {
      if (text === undefined || !/^(\[[0-9a-fA-F:]+\]|[^:\s]+):\d{1,5}$/.test(text)) return { ok: false, why: 'expected "host:port"' };
      const port = Number(text.slice(text.lastIndexOf(':') + 1));
      return port <= 65535 ? { ok: true, value: text } : { ok: false, why: 'port out of range' };
    }
    case 'duration': {
      const ms = typeof raw === 'number' ? raw : text !== undefined ? parseDuration_ms(text) : undefined;
      return ms !== undefined && ms >= 0 && Number.isFinite(ms)
        ? { ok: true, value: ms }
        : { ok: false, why: 'expected a duration such as "10s", "1m" or "500ms"' };
    }
    case 'timeout': {
      // Node's timers hold at most 2^31-1 ms: a longer one fires at once.
      const r = coerce('duration', raw);
      if (!r.ok) return r;
      return (r.value as number) <= MAX_TIMER_MS ? r : { ok: false, why: 'expected a duration of at most 24 days' };
    }
    case 'size': {
      const n = typeof raw === 'number' ? raw : text !== undefined ? parseSize_bytes(text) : undefined;
      return n !== undefined && n > 0 ? { ok: true, value: n } : { ok: false, why: 'expected a size such as "32MiB"' };
    }
    case 'threads': {
      if (text === 'auto') return { ok: true, value: 'auto' };
      const n = typeof raw === 'number' ? raw : typeof raw === 'bigint' ? Number(raw) : text !== undefined && /^\d+$/.test(text) ? Number(text) : NaN;
      return Number.isInteger(n) && n > 0 ? { ok: true, value: n } : { ok: false, why: 'expected "auto" or a positive integer' };
    }
    case 'int': {
      const n = typeof raw === 'number' ? raw : typeof raw === 'bigint' ? Number(raw) : text !== undefined && /^\d+$/.test(text) ? Number(text) : NaN;
      return Number.isInteger(n) && n > 0 ? { ok: true, value: n } : { ok: false, why: 'expected a positive integer' };
    }
    case 'count': {
      const n = typeof raw === 'number' ? raw : typeof raw === 'bigint' ? Number(raw) : text !== undefined && /^\d+$/.test(text) ? Number(text) : NaN;
      return Number.isSafeInteger(n) && n >= 0 ? { ok: true, value: n } : { ok: false, why: 'expected a whole number >= 0' };
    }
    case 'number': {
      const n = typeof raw === 'number' ? raw : typeof raw === 'bigint' ? Number(raw) : text !== undefined ? Number(text) : NaN;
      return Number.isFinite(n) && n >= 1 ? { ok: true, value: n } : { ok: false, why: 'expected a number >= 1' };
    }
    case 'bool': {
      if (typeof raw === 'boolean') return { ok: true, value: raw };
      if (text === 'true' || text === 'false') return { ok: true, value: text === 'true' };
      return { ok: false, why: 'expected true or false' };
    }
    case 'attempts': {
      if (text === 'unlimited') return { ok: true, value: undefined };
      const n = typeof raw === 'number' ? raw : typeof raw === 'bigint' ? Number(raw) : text !== undefined && /^\d+$/.test(text) ? Number(text) : NaN;
      return Number.isInteger(n) && n >= 1 ? { ok: true, value: n } : { ok: false, why: 'expected a positive integer or "unlimited"' };
    }
    case 'on_max':
      return text === 'pause' || text === 'kill' ? { ok: true, value: text } : { ok: false, why: 'expected "pause" or "kill"' };
    case 'log_format':
      return text === 'pretty' || text === 'json' || text === 'auto' ? { ok: true, value: text } : { ok: false, why: 'expected "pretty", "json" or "auto"' };
  }
}

function lookup(obj: Record<string, unknown>, path: string): unknown {
  let cur: unknown = obj;
  for (const part of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur;
}

/** Line of `key` (its last path segment) inside its table, for error messages; best effort. */
function lineOf(text: string, path: string): number | undefined {
  const parts = path.split('.');
  const leaf = parts[parts.length - 1]!;
  const table = parts.slice(0, -1).join('.');
  const lines = text.split('\n');
  let current = '';
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    const header = /^\[([^\]]+)\]/.exec(line);
    if (header) {
      current = header[1]!.trim();
      continue;
    }
    const key = /^([A-Za-z0-9_.-]+)\s*=/.exec(line)?.[1];
    if (key === undefined) continue;
    const full = current ? `${current}.${key}` : key;
    if (full === path || (current === table && key === leaf)) return i + 1;
  }
  return undefined;
}

/** Keys that are arrays of tables, read by their own parser (no environment override). */
const KAFKA_CLUSTERS = 'ingress.kafka_clusters';
const SCHEDULES = 'schedules';
// The fields of PUT /schedules/{name} (admin/schedules.ts checks their values), and the name.
const SCHEDULE_KEYS = new Set(['name', 'target', 'cron', 'timezone', 'every', 'input', 'overlap', 'catchup', 'late_after', 'paused']);

function knownPaths(): Set<string> {
  return new Set([...schema.map((s) => s.path), KAFKA_CLUSTERS, SCHEDULES]);
}

/** Validates the shape of `[[schedules]]` (names, keys); the values are checked when a schedule is applied. */
function parseSchedules(raw: unknown, file: string | undefined, text: string): ConfiguredSchedule[] {
  if (raw === undefined) return [];
  const at = (i: number | undefined, key?: string) => {
    const line = i === undefined ? undefined : lineOfArrayTable(text, SCHEDULES, i, key);
    return `${file}${line ? `:${line}` : ''}`;
  };
  if (!Array.isArray(raw)) throw new KeelError('RT0002', `${at(undefined)}: key '${SCHEDULES}': expected an array of tables ([[${SCHEDULES}]])`);
  const out: ConfiguredSchedule[] = [];
  raw.forEach((c: unknown, i) => {
    const where = (key?: string) => `${at(i, key)}: key '${SCHEDULES}[${i}]${key ? `.${key}` : ''}'`;
    if (c === null || typeof c !== 'object' || Array.isArray(c)) throw new KeelError('RT0002', `${where()}: expected a table`);
    const { name, ...body } = c as Record<string, unknown>;
    if (typeof name !== 'string' || !/^[A-Za-z0-9_.-]{1,128}$/.test(name)) {
      throw new KeelError('RT0002', `${where('name')}: expected a schedule name of 1 to 128 letters, digits, '_', '.' or '-', got ${JSON.stringify(name)}`);
    }
    if (out.some((o) => o.name === name)) throw new KeelError('RT0002', `${where('name')}: the schedule '${name}' is declared twice`);
    for (const k of Object.keys(body)) {
      if (!SCHEDULE_KEYS.has(k)) throw new KeelError('RT0002', `${where(k)}: unknown key (a schedule takes ${[...SCHEDULE_KEYS].join(', ')})`);
    }
    // TOML integers arrive as bigint: the input is JSON.
    out.push({ name, body: JSON.parse(JSON.stringify(body, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v))) as Record<string, unknown> });
  });
  return out;
}

/** Line of the `index`-th `[[table]]` header, and of `key` inside that table when given. */
function lineOfArrayTable(text: string, table: string, index: number, key?: string): number | undefined {
  const lines = text.split('\n');
  let seen = -1;
  let inside = false;
  let header: number | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    const h = /^\[\[\s*([^\]]+?)\s*\]\]/.exec(line) ?? /^\[\s*([^\]]+?)\s*\]/.exec(line);
    if (h) {
      inside = line.startsWith('[[') && h[1] === table && ++seen === index;
      if (inside) header = i + 1;
      continue;
    }
    if (inside && key !== undefined && /^([A-Za-z0-9_."-]+)\s*=/.exec(line)?.[1]?.replace(/"/g, '') === key) return i + 1;
  }
  return header;
}

const BROKER = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):\d{1,5}$/;

/** Validates `[[ingress.kafka_clusters]]`: unique names usable in `kafka://<name>/<topic>`, host:port brokers. */
function parseKafkaClusters(raw: unknown, file: string | undefined, text: string): KafkaCluster[] {
  if (raw === undefined) return [];
  const at = (i: number | undefined, key?: string) => {
    const line = i === undefined ? undefined : lineOfArrayTable(text, KAFKA_CLUSTERS, i, key);
    return `${file}${line ? `:${line}` : ''}`;
  };
  if (!Array.isArray(raw)) {
    throw new KeelError('RT0002', `${at(undefined)}: key '${KAFKA_CLUSTERS}': expected an array of tables ([[${KAFKA_CLUSTERS}]])`);
  }
  const out: KafkaCluster[] = [];
  raw.forEach((c: unknown, i) => {
    const where = (key?: string) => `${at(i, key)}: key '${KAFKA_CLUSTERS}[${i}]${key ? `.${key}` : ''}'`;
    if (c === null || typeof c !== 'object' || Array.isArray(c)) throw new KeelError('RT0002', `${where()}: expected a table`);
    const t = c as Record<string, unknown>;
    const name = t.name;
    if (typeof name !== 'string' || !/^[A-Za-z0-9_.-]+$/.test(name)) {
      throw new KeelError('RT0002', `${where('name')}: expected a cluster name of letters, digits, '_', '.' or '-', got ${JSON.stringify(name)}`);
    }
    if (out.some((o) => o.name === name)) throw new KeelError('RT0002', `${where('name')}: the cluster name '${name}' is defined twice`);
    const brokers = t.brokers;
    if (!Array.isArray(brokers) || brokers.length === 0 || brokers.some((b) => typeof b !== 'string' || !BROKER.test(b))) {
      throw new KeelError('RT0002', `${where('brokers')}: expected a non-empty array of "host:port" strings, got ${JSON.stringify(brokers)}`);
    }
    const properties: Record<string, string> = { 'bootstrap.servers': (brokers as string[]).join(',') };
    for (const [k, v] of Object.entries(t)) {
      if (k === 'name' || k === 'brokers') continue;
      if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean' && typeof v !== 'bigint') {
        throw new KeelError('RT0002', `${where(k)}: a cluster property must be a string, number or boolean, got ${JSON.stringify(v)}`);
      }
      if (k === 'bootstrap.servers' || k === 'metadata.broker.list') {
        throw new KeelError('RT0002', `${where(k)}: give the brokers in 'brokers', not in '${k}'`);
      }
      properties[k] = String(v);
    }
    out.push({ name, brokers: [...(brokers as string[])], properties });
  });
  return out;
}

function flatten(obj: Record<string, unknown>, prefix = ''): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(obj)) {
    const p = prefix ? `${prefix}.${k}` : k;
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Date)) out.push(...flatten(v as Record<string, unknown>, p));
    else out.push(p);
  }
  return out;
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.split('.');
  let cur = target;
  for (const p of parts.slice(0, -1)) {
    cur[p] ??= {};
    cur = cur[p] as Record<string, unknown>;
  }
  cur[parts[parts.length - 1]!] = value;
}

/** A config value by its schema path, already coerced to its schema kind. */
type Values = <T>(path: string) => T;

/**
 * Reads the TOML file (when given) and the KEEL_ environment into one typed config.
 * Every problem is an RT0002 that names the file, line and key, or the variable.
 */
export function loadConfig(file: string | undefined, env: NodeJS.ProcessEnv = process.env): Config {
  const { values: fileValues, text } = file === undefined ? { values: {}, text: '' } : readConfigFile(file);
  const raw = resolveValues(fileValues, file, text, env);
  const kafka_clusters = parseKafkaClusters(lookup(fileValues, KAFKA_CLUSTERS), file, text);
  const schedules = parseSchedules(lookup(fileValues, SCHEDULES), file, text);
  const v: Values = <T>(path: string): T => lookup(raw, path) as T;
  const baseDir = v<string>('base_dir');
  return {
    base_dir: baseDir,
    schedules,
    ingress: {
      bind_address: v<string>('ingress.bind_address'),
      kafka_clusters,
      request_size_limit_bytes: v<number>('ingress.request_size_limit'),
      auth_tokens: authTokens('ingress', v),
      kafka_max_pending_invocations: v<number>('ingress.kafka_max_pending_invocations'),
    },
    admin: adminConfig(v),
    http: {
      idle_timeout_ms: v<number>('http.idle_timeout'),
      header_timeout_ms: v<number>('http.header_timeout'),
      request_timeout_ms: v<number>('http.request_timeout'),
      max_connections: v<number>('http.max_connections'),
      max_header_size_bytes: v<number>('http.max_header_size'),
      max_header_count: v<number>('http.max_header_count'),
    },
    meta: { storage_path: v<string | undefined>('meta.storage_path') ?? join(baseDir, 'meta') },
    worker: workerConfig(v, baseDir),
    default_retry_policy: {
      initial_interval_ms: v<number>('default_retry_policy.initial_interval'),
      exponentiation_factor: v<number>('default_retry_policy.exponentiation_factor'),
      max_interval_ms: v<number>('default_retry_policy.max_interval'),
      max_attempts: v<number | undefined>('default_retry_policy.max_attempts'),
      on_max_attempts: v<'pause' | 'kill'>('default_retry_policy.on_max_attempts'),
    },
    // The default is bounded by the maximum too (RT0022 applies to it as to manifest values).
    default_journal_retention_ms:
      Math.min(v<number>('default_journal_retention'), v<number | undefined>('max_journal_retention') ?? Number.POSITIVE_INFINITY),
    max_journal_retention_ms: v<number | undefined>('max_journal_retention'),
    default_idempotency_retention_ms: v<number>('default_idempotency_retention'),
    default_workflow_completion_retention_ms: v<number>('default_workflow_completion_retention'),
    log: { level: v<string>('log.level'), format: v<'pretty' | 'json' | 'auto'>('log.format') },
    tracing: { endpoint: v<string | undefined>('tracing.endpoint') },
    cluster: clusterConfig(v),
  };
}

/** The TOML file's values and text; an unreadable or unparsable file, or an unknown key, is RT0002. */
function readConfigFile(file: string): { values: Record<string, unknown>; text: string } {
  let text: string;
  let values: Record<string, unknown>;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new KeelError('RT0002', `cannot read configuration file ${file}: ${(err as Error).message}`);
  }
  try {
    values = parseToml(text) as Record<string, unknown>;
  } catch (err) {
    const line = err instanceof TomlError ? err.line : undefined;
    const first = (err as Error).message.split('\n')[0];
    throw new KeelError('RT0002', `cannot parse ${file}${line ? `:${line}` : ''}: ${first}`);
  }
  const known = knownPaths();
  for (const p of flatten(values)) {
    if (!known.has(p) && !p.startsWith(`${KAFKA_CLUSTERS}.`) && !p.startsWith(`${SCHEDULES}.`)) {
      const line = lineOf(text, p);
      throw new KeelError('RT0002', `${file}${line ? `:${line}` : ''}: unknown key '${p}'`);
    }
  }
  return { values, text };
}

/** Every schema key's value: its default, then the file's, then the environment's; each coerced to its kind. */
function resolveValues(fileValues: Record<string, unknown>, file: string | undefined, text: string, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const raw: Record<string, unknown> = {};
  for (const { path, kind, dflt } of schema) {
    const name = envName(path);
    let value: unknown = dflt;
    const fromFile = lookup(fileValues, path);
    if (fromFile !== undefined) {
      const r = coerce(kind, fromFile);
      if (!r.ok) {
        const line = lineOf(text, path);
        throw new KeelError('RT0002', `${file}${line ? `:${line}` : ''}: key '${path}': ${r.why}, got ${JSON.stringify(fromFile)}`);
      }
      value = r.value;
    }
    const fromEnv = env[name];
    if (fromEnv !== undefined) {
      const r = coerce(kind, fromEnv);
      if (!r.ok) throw new KeelError('RT0002', `environment variable ${name} (key '${path}'): ${r.why}, got ${JSON.stringify(fromEnv)}`);
      value = r.value;
    }
    setPath(raw, path, value);
  }
  for (const name of Object.keys(env)) {
    if (name.startsWith(ENV_PREFIX) && !schema.some((s) => envName(s.path) === name)) {
      throw new KeelError('RT0002', `unknown environment variable ${name}`);
    }
  }
  return raw;
}

function adminConfig(v: Values): Config['admin'] {
  return {
    bind_address: v<string>('admin.bind_address'),
    auth_tokens: authTokens('admin', v),
    discovery_timeout_ms: v<number>('admin.discovery_timeout'),
    query_engine: {
      pgsql_bind_address: v<string>('admin.query_engine.pgsql_bind_address'),
      pgsql_password: v<string | undefined>('admin.query_engine.pgsql_password'),
      query_timeout_ms: v<number>('admin.query_engine.query_timeout'),
      max_result_rows: v<number>('admin.query_engine.max_result_rows'),
      max_result_bytes: v<number>('admin.query_engine.max_result_bytes'),
      memory_limit_bytes: v<number>('admin.query_engine.memory_limit'),
      threads: v<number>('admin.query_engine.threads'),
      recent_statuses: v<number>('admin.query_engine.recent_statuses'),
      indexed_statuses: v<number>('admin.query_engine.indexed_statuses'),
      idle_timeout_ms: v<number>('admin.query_engine.idle_timeout'),
    },
  };
}

function workerConfig(v: Values, baseDir: string): Config['worker'] {
  return {
    partitions: v<number>('worker.partitions'),
    threads: threadsOf(v<number | 'auto'>('worker.threads'), {
      partitions: v<number>('worker.partitions'),
      clustered: v<string | undefined>('cluster.brokers') !== undefined,
      concurrent_invocations_limit: v<number>('worker.invoker.concurrent_invocations_limit'),
    }),
    storage_db: {
      path: v<string | undefined>('worker.storage_db.path') ?? join(baseDir, 'worker'),
      fsync: v<boolean>('worker.storage_db.fsync'),
      log_retained_records: v<number>('worker.storage_db.log_retained_records'),
      state_cache_size_bytes: v<number>('worker.storage_db.state_cache_size'),
      block_cache_size_bytes: v<number>('worker.storage_db.block_cache_size'),
      max_open_files: v<number>('worker.storage_db.max_open_files'),
      write_buffer_size_bytes: v<number>('worker.storage_db.write_buffer_size'),
    },
    invoker: {
      inactivity_timeout_ms: v<number>('worker.invoker.inactivity_timeout'),
      abort_timeout_ms: v<number>('worker.invoker.abort_timeout'),
      message_size_limit_bytes: v<number>('worker.invoker.message_size_limit'),
      concurrent_invocations_limit: v<number>('worker.invoker.concurrent_invocations_limit'),
      connect_timeout_ms: v<number>('worker.invoker.connect_timeout'),
      request_identity_private_key_pem_file: v<string | undefined>('worker.invoker.request_identity_private_key_pem_file'),
      request_identity_expiration_ms: v<number>('worker.invoker.request_identity_expiration'),
      disable_eager_state: v<boolean>('worker.invoker.disable_eager_state'),
    },
    cleanup_interval_ms: v<number>('worker.cleanup_interval'),
    num_timers_in_memory_limit: v<number>('worker.num_timers_in_memory_limit'),
  };
}

/** A Kafka topic name: what the broker accepts (letters, digits, '.', '_', '-'; at most 249). */
const TOPIC = /^[A-Za-z0-9._-]{1,200}$/;

function clusterConfig(v: Values): ClusterConfig | undefined {
  const brokers = v<string | undefined>('cluster.brokers');
  if (brokers === undefined) return undefined;
  const threads = v<number | 'auto'>('worker.threads');
  if (threads !== 1 && threads !== 'auto') throw new KeelError('RT0002', `key 'worker.threads' is ${JSON.stringify(threads)}: a cluster node needs worker.threads = 1 (or auto) for now (partitions on threads do not lead or follow Kafka logs yet)`);
  const list = brokers.split(',').map((b) => b.trim()).filter((b) => b.length > 0);
  if (list.length === 0 || list.some((b) => !BROKER.test(b))) throw new KeelError('RT0002', `key 'cluster.brokers': a comma-separated list of host:port, got ${JSON.stringify(brokers)}`);
  const topic = v<string>('cluster.log_topic');
  if (!TOPIC.test(topic)) throw new KeelError('RT0002', `key 'cluster.log_topic': letters, digits, '.', '_' and '-' (at most 200), got ${JSON.stringify(topic)}`);
  const node = v<string | undefined>('cluster.node_name') ?? hostname();
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(node)) throw new KeelError('RT0002', `key 'cluster.node_name': letters, digits, '.', '_' and '-' (at most 64), got ${JSON.stringify(node)}`);
  const rf = v<number>('cluster.replication_factor');
  const isr = v<number>('cluster.min_insync_replicas');
  if (rf < 1 || isr < 1 || isr > rf) throw new KeelError('RT0002', `keys 'cluster.replication_factor' (${rf}) and 'cluster.min_insync_replicas' (${isr}): both at least 1, and min_insync_replicas at most replication_factor`);
  const bound = splitAddress(v<string>('ingress.bind_address')).host;
  const advertised = v<string | undefined>('cluster.advertised_host') ?? (bound === '0.0.0.0' || bound === '::' ? hostname() : bound);
  return { node_name: node, advertised_host: advertised, session_timeout_ms: v<number>('cluster.session_timeout'), brokers: list, log_topic: topic, replication_factor: rf, min_insync_replicas: isr, transactional: v<boolean>('cluster.transactional'), spread_partitions: v<boolean>('cluster.spread_partitions'), ...snapshotConfig(v), auth_tokens: authTokens('cluster', v) };
}

/** A token travels in an HTTP header: visible ASCII only. */
const TOKEN = /^[\x21-\x7e]+$/;
/** Tokens per server: enough to rotate, few enough to compare each one on every request. */
const MAX_AUTH_TOKENS = 16;

/**
 * The bearer tokens of `ingress`, `admin` or `cluster`: `auth_token`, plus every non-empty line of
 * `auth_token_file` (several lines let tokens be rotated without downtime). Empty: no auth.
 */
function authTokens(server: 'ingress' | 'admin' | 'cluster', v: Values): string[] {
  const tokens: string[] = [];
  const inline = v<string | undefined>(`${server}.auth_token`);
  if (inline !== undefined) tokens.push(inline.trim());
  const file = v<string | undefined>(`${server}.auth_token_file`);
  if (file !== undefined) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new KeelError('RT0002', `key '${server}.auth_token_file': cannot read ${file}: ${(err as Error).message}`);
    }
    const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.length > 0 && !l.startsWith('#'));
    if (lines.length === 0) throw new KeelError('RT0002', `key '${server}.auth_token_file': ${file} holds no token`);
    tokens.push(...lines);
  }
  if (tokens.length > MAX_AUTH_TOKENS) throw new KeelError('RT0002', `key '${server}.auth_token[_file]': at most ${MAX_AUTH_TOKENS} tokens, got ${tokens.length}`);
  for (const t of tokens) {
    if (!TOKEN.test(t)) throw new KeelError('RT0002', `key '${server}.auth_token[_file]': a token must be visible ASCII characters without spaces`);
  }
  return tokens;
}

/** Splits "host:port" (IPv6 in brackets) for node's listen(). */
export function splitAddress(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  const host = address.slice(0, i).replace(/^\[|\]$/g, '');
  return { host, port: Number(address.slice(i + 1)) };
}

function snapshotConfig(v: <T>(path: string) => T): Pick<ClusterConfig, 'snapshot_path' | 'snapshot_interval_records' | 'snapshots_kept'> {
  const path = v<string | undefined>('cluster.snapshot_path');
  return { snapshot_path: path === undefined || path === '' ? undefined : resolvePath(path), snapshot_interval_records: v<number>('cluster.snapshot_interval_records'), snapshots_kept: v<number>('cluster.snapshots_kept') };
}

/**
 * Below this many cores `auto` is one thread: with fewer, the SDK services, the load and V8's own
 * threads share the cores with the server, and threads cost more than they give (bench/README: on
 * 2 shared cores two threads served 20% fewer calls at 40% more CPU per call; with 4 cores of its
 * own the server served 24% more noop calls with threads, 95% more with 8).
 */
const AUTO_THREADS_MIN_CORES = 4;

/**
 * worker.threads: a count, or 'auto' (the default): a thread per core this process may use where it
 * may use AUTO_THREADS_MIN_CORES or more, else one. Never more than the partitions (one per thread
 * at least) nor, for 'auto', than concurrent_invocations_limit (each thread gets one slot of it at
 * least). A cluster node's 'auto' is one: its partitions lead and follow Kafka logs on the main
 * event loop (a count above one is refused with the cluster's keys), so one file serves both kinds of node.
 */
function threadsOf(value: number | 'auto', o: AutoThreadsLimits): number {
  return value === 'auto' ? autoThreads(availableParallelism(), o) : Math.min(value, o.partitions);
}

export interface AutoThreadsLimits {
  partitions: number;
  clustered: boolean;
  concurrent_invocations_limit: number;
}

/** What worker.threads = 'auto' is on a process that may use `cores` cores. */
export function autoThreads(cores: number, o: AutoThreadsLimits): number {
  if (o.clustered || cores < AUTO_THREADS_MIN_CORES) return 1;
  return Math.min(cores, o.partitions, o.concurrent_invocations_limit);
}
