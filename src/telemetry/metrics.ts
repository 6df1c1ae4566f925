import { constants as perf, PerformanceObserver } from 'node:perf_hooks';
import type { Registry } from 'prom-client';
import { assert } from '../common/assert.js';
import { loadPackage } from '../common/load-package.js';
import { catalogue } from '../errors/index.js';
import {
  BATCH_BYTES_BUCKETS,
  BATCH_COMMANDS_BUCKETS,
  Cell,
  CellFamily,
  HistogramFamily,
  SECONDS_BUCKETS,
  SampledCounter,
  SampledGauge,
  WRITE_SECONDS_BUCKETS,
  sumCollected,
  type CollectedMetric,
  type HistogramCell,
  type Labels,
  type ScrapedMetric,
} from './cells.js';

export { Cell, HistogramCell } from './cells.js';

export type CompletionOutcome = 'succeeded' | 'failed' | 'killed';
/** How an attempt ended: the endpoint ended it, it suspended, it failed, or Keel stopped it (kill, pause, shutdown). */
export type AttemptOutcome = 'completed' | 'suspended' | 'failed' | 'aborted';

/** The cells of one service and handler, bound once, bumped by the invoker and the worker. */
export interface TargetCells {
  readonly started: Cell;
  readonly completed: Readonly<Record<CompletionOutcome, Cell>>;
  readonly attempts: Readonly<Record<AttemptOutcome, Cell>>;
  readonly retries: Cell;
  readonly attemptSeconds: HistogramCell;
  readonly invocationSeconds: HistogramCell;
}

/** The cells of one partition, bumped by its processor once per batch. */
export interface PartitionCells {
  readonly batchCommands: HistogramCell;
  readonly batchBytes: HistogramCell;
  readonly writeSeconds: HistogramCell;
  readonly journalEntries: Cell;
}

/** The store's writes (one per group commit), by whether each was synced. */
export interface StoreWriteCells {
  readonly synced: HistogramCell;
  readonly unsynced: HistogramCell;
}

/** Queue depths and sizes, read only when /metrics is scraped. */
export interface MetricSources {
  invoker(): { waiting: number; running: number };
  endpoints(): { connections: number; streams: number };
  partitions(): Array<{ partition: number; queued_commands: number; outbox_entries: number; invocations: ReadonlyMap<string, number> }>;
  storeSizes(): Promise<Array<{ store: string; bytes: number }>>;
  /** Per flow-control rule (pattern): invocations holding its slots, waiting on its concurrency, waiting on its rate. */
  flowRules(): ReadonlyMap<string, { running: number; queued: number; throttled: number }>;
}

/**
 * Service/handler label sets past this many are counted under `_other`: a registry that keeps
 * growing (a deployment per commit, say) cannot grow the scrape without bound.
 */
const MAX_TARGETS = 2_000;
/** Node's GC kinds (perf_hooks) and their label. */
const GC_KINDS: ReadonlyArray<[number, string]> = [
  [perf.NODE_PERFORMANCE_GC_MINOR, 'minor'],
  [perf.NODE_PERFORMANCE_GC_MAJOR, 'major'],
  [perf.NODE_PERFORMANCE_GC_INCREMENTAL, 'incremental'],
  [perf.NODE_PERFORMANCE_GC_WEAKCB, 'weakcb'],
];
export const OTHER = '_other';

const COMPLETIONS: readonly CompletionOutcome[] = ['succeeded', 'failed', 'killed'];
const ATTEMPTS: readonly AttemptOutcome[] = ['completed', 'suspended', 'failed', 'aborted'];

/**
 * Every `keel_*` metric, in one prom-client Registry served at `GET /metrics`. Hot paths get
 * pre-bound cells (`target`, `partition`, `error`); queue depths are sampled at scrape time.
 * prom-client itself is loaded only by `load()` (importing it costs about a third of what
 * fastify's import does: it stays off the startup path).
 */
export class KeelMetrics {
  private readonly scraped: ScrapedMetric[] = [];
  private registry: Promise<Registry> | undefined;
  /** Partition threads' values (worker.threads > 1): fetched at each scrape, added to this thread's. */
  private peers: (() => Promise<CollectedMetric[][]>) | undefined;
  private peerValues = new Map<string, CollectedMetric[]>();
  /** Whether a service/handler pair is registered; label sets come only from the registry. */
  knownTarget: (service: string, handler: string) => boolean = () => true;

  private readonly targets = new Map<string, Map<string, TargetCells>>();
  private targetCount = 0;
  private other: TargetCells | undefined;
  /** Cells of the codes seen so far: a scrape lists the codes that occurred, not the whole catalogue. */
  private readonly errors = new Map<string, Cell>();
  private readonly f = {
    started: new CellFamily('keel_invocations_started_total', 'Invocations whose first attempt started, by service and handler'),
    completed: new CellFamily('keel_invocations_completed_total', 'Invocations that completed, by service, handler and outcome (succeeded, failed, killed)'),
    attempts: new CellFamily('keel_attempts_total', 'Attempts that ended, by service, handler and outcome (completed, suspended, failed, aborted)'),
    retries: new CellFamily('keel_invocation_retries_total', 'Failed attempts that will be retried, by service and handler'),
    attemptSeconds: new HistogramFamily('keel_attempt_duration_seconds', 'Duration of one attempt, from its start to its end, by service and handler', SECONDS_BUCKETS),
    invocationSeconds: new HistogramFamily('keel_invocation_duration_seconds', 'End-to-end duration of an invocation, from its acceptance to its completion, by service and handler', SECONDS_BUCKETS),
    journalEntries: new CellFamily('keel_journal_entries_appended_total', 'Journal entries appended (commands and notifications), by partition'),
    batchCommands: new HistogramFamily('keel_log_batch_commands', 'Commands per log batch (one store write), by partition', BATCH_COMMANDS_BUCKETS),
    batchBytes: new HistogramFamily('keel_log_batch_size_bytes', 'Bytes of log records per batch (materialised state writes not included), by partition', BATCH_BYTES_BUCKETS),
    writeSeconds: new HistogramFamily('keel_log_write_duration_seconds', 'Duration of one log batch write (fsync included when on), by partition', WRITE_SECONDS_BUCKETS),
    storeWriteSeconds: new HistogramFamily('keel_store_write_duration_seconds', "Duration of one store write: the batches of every partition ready at once, in one group commit (fsync included when synced), by whether it was synced; its sum over a window's length is how busy the store was", WRITE_SECONDS_BUCKETS),
    gcPauses: new HistogramFamily('keel_gc_pause_seconds', "Every pause of the main thread for garbage collection, by kind (minor, major, incremental, weakcb); nodejs_gc_duration_seconds counts only the first of each batch of them", WRITE_SECONDS_BUCKETS),
    errors: new CellFamily('keel_errors_total', 'Log lines at warn or error level carrying a stable error code, by code'),
    ingressInFlight: new CellFamily('keel_ingress_requests_in_flight', 'Ingress requests waiting for an invocation (call, send, attach, output)', 'gauge'),
    flowRejected: new CellFamily('keel_flow_rule_rejected_total', 'Requests refused (429) because the backlog of a flow-control rule was full, by rule'),
  };
  /** Rule pattern → its rejected cell (bounded by the rule book: 10,000 rules at most). */
  private readonly flowRejectedCells = new Map<string, Cell>();
  /** Ingress requests in flight: the ingress bumps it up and down. */
  readonly ingressInFlight: Cell;

  constructor(private readonly options: { processMetrics?: boolean } = {}) {
    for (const m of Object.values(this.f)) this.register(m);
    this.ingressInFlight = this.f.ingressInFlight.cell();
  }

  /** Loads prom-client and registers every metric; the server calls it once it is ready, a scrape at the latest. */
  load(): Promise<Registry> {
    this.registry ??= loadPackage<typeof import('prom-client')>('prom-client').then(({ Registry, collectDefaultMetrics }) => {
      const registry = new Registry();
      // prom-client reads any object with a name and get(); its own metric classes are not
      // used on the hot path (see cells.ts).
      for (const m of this.scraped) registry.registerMetric(this.withPeers(m) as unknown as Parameters<Registry['registerMetric']>[0]);
      // Process metrics under their usual names (process_*, nodejs_*): dashboards expect them so.
      if (this.options.processMetrics) {
        collectDefaultMetrics({ register: registry });
        this.observeGc();
      }
      return registry;
    });
    return this.registry;
  }

  /**
   * Every GC pause, into keel_gc_pause_seconds. prom-client's gc metric observes only the first entry
   * of each callback, and Node hands several over at once (two scavenges in one turn of the loop under
   * load): it under-counts the pauses that make the tail (bench/tail.mjs reads these).
   */
  private observeGc(): void {
    const cells = new Map<number, HistogramCell>(GC_KINDS.map(([flag, kind]) => [flag, this.f.gcPauses.cell({ kind })]));
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) cells.get((entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? -1)?.observe(entry.duration / 1000);
    }).observe({ entryTypes: ['gc'] });
  }

  /** The cells of a service and handler; unknown or too many pairs share the `_other` cells. */
  target(service: string, handler: string): TargetCells {
    const cells = this.targets.get(service)?.get(handler);
    if (cells !== undefined) return cells;
    if (this.targetCount >= MAX_TARGETS || !this.knownTarget(service, handler)) return (this.other ??= this.bind({ service: OTHER, handler: OTHER }));
    let handlers = this.targets.get(service);
    if (handlers === undefined) this.targets.set(service, (handlers = new Map()));
    const bound = this.bind({ service, handler });
    handlers.set(handler, bound);
    this.targetCount += 1;
    return bound;
  }

  partition(partition: number): PartitionCells {
    const labels = { partition: String(partition) };
    return {
      batchCommands: this.f.batchCommands.cell(labels),
      batchBytes: this.f.batchBytes.cell(labels),
      writeSeconds: this.f.writeSeconds.cell(labels),
      journalEntries: this.f.journalEntries.cell(labels),
    };
  }

  /** The cells of the store's group commits (storage/group-writer.ts): synced and not. */
  storeWrites(): StoreWriteCells {
    return { synced: this.f.storeWriteSeconds.cell({ synced: 'true' }), unsynced: this.f.storeWriteSeconds.cell({ synced: 'false' }) };
  }

  /** A request refused because the backlog of `rule` was full. */
  flowRejected(rule: string): void {
    let cell = this.flowRejectedCells.get(rule);
    if (cell === undefined) this.flowRejectedCells.set(rule, (cell = this.f.flowRejected.cell({ rule })));
    cell.inc();
  }

  /** A warn or error line carried `code`: codes outside the catalogue count as `_other`. */
  error(code: string): void {
    let cell = this.errors.get(code);
    if (cell === undefined) {
      const label = catalogue.has(code) ? code : OTHER;
      cell = this.errors.get(label) ?? this.f.errors.cell({ code: label });
      this.errors.set(label, cell);
    }
    cell.inc();
  }

  /** Queue depths, invocations by status and store sizes, sampled at scrape time. */
  sample(sources: MetricSources): void {
    const perPartition = <K extends 'queued_commands' | 'outbox_entries'>(key: K) => () =>
      sources.partitions().map((p): [Labels, number] => [{ partition: String(p.partition) }, p[key]]);
    this.register(new SampledGauge('keel_invoker_attempts_waiting', 'Attempts waiting for an invoker slot (concurrent_invocations_limit)', () => [[{}, sources.invoker().waiting]]));
    this.register(new SampledGauge('keel_invoker_attempts_running', 'Attempts running against service endpoints', () => [[{}, sources.invoker().running]]));
    this.register(new SampledGauge('keel_endpoint_http2_connections', 'HTTP/2 connections open to service endpoints', () => [[{}, sources.endpoints().connections]]));
    this.register(new SampledGauge('keel_endpoint_http2_streams', 'Streams (attempts) open on those connections', () => [[{}, sources.endpoints().streams]]));
    this.register(new SampledGauge('keel_partition_queued_commands', 'Commands waiting for the next log batch, by partition', perPartition('queued_commands')));
    this.register(new SampledGauge('keel_outbox_entries', 'Messages to other partitions not yet delivered, by partition', perPartition('outbox_entries')));
    this.register(
      new SampledGauge('keel_invocations', 'Invocations that have not completed, by partition and status', () =>
        sources.partitions().flatMap((p) => [...p.invocations].map(([status, n]): [Labels, number] => [{ partition: String(p.partition), status }, n])),
      ),
    );
    this.register(
      new SampledGauge('keel_flow_rule_invocations', 'Per flow-control rule: invocations holding its slots (state=running, counted at each level a rule governs), waiting on its concurrency (state=queued) and on its rate (state=throttled)', () =>
        [...sources.flowRules()].flatMap(([rule, n]): Array<[Labels, number]> => [[{ rule, state: 'running' }, n.running], [{ rule, state: 'queued' }, n.queued], [{ rule, state: 'throttled' }, n.throttled]]),
      ),
    );
    this.register(
      new SampledGauge('keel_store_size_bytes', 'Bytes on disk of each store (worker: partition logs and state; meta: the metadata log)', async () =>
        (await sources.storeSizes()).map((s): [Labels, number] => [{ store: s.store }, s.bytes]),
      ),
    );
  }

  /** In a cluster: this node's role, the members it sees, and the epoch it leads each partition in. */
  sampleCluster(source: () => { active: boolean; members: number; epochs: ReadonlyArray<[partition: number, epoch: number]>; lag: ReadonlyArray<[partition: number, offsets: number]>; fetch_requests: number }): void {
    this.register(new SampledCounter('keel_log_fetch_requests_total', 'Fetch requests this node sent to the Kafka brokers to read the partition logs', () => [[{}, source().fetch_requests]]));
    this.register(new SampledGauge('keel_cluster_node_active', 'Whether this node is the active node of its cluster (1) or stands by (0)', () => [[{}, source().active ? 1 : 0]]));
    this.register(new SampledGauge('keel_cluster_members', 'Nodes in the cluster, as this node last saw its group', () => [[{}, source().members]]));
    this.register(
      new SampledGauge('keel_partition_leader_epoch', 'The leader epoch this node leads each partition in (absent: it does not lead it)', () =>
        source().epochs.map(([partition, epoch]): [Labels, number] => [{ partition: String(partition) }, epoch]),
      ),
    );
    this.register(
      new SampledGauge('keel_partition_log_lag_offsets', "Offsets of each partition's Kafka log this node's copy has not applied yet (read every 5 s)", () =>
        source().lag.map(([partition, offsets]): [Labels, number] => [{ partition: String(partition) }, offsets]),
      ),
    );
  }

  /** Every metric's values now: a partition thread's, for the main thread to add to its own. */
  collect(): Promise<CollectedMetric[]> {
    return Promise.all(this.scraped.map((m) => m.get()));
  }

  /** Values of other threads' metrics, fetched at each scrape and added to this one's (before load). */
  addPeers(peers: () => Promise<CollectedMetric[][]>): void {
    assert(this.registry === undefined && this.peers === undefined, () => 'peers added after prom-client was loaded, or twice');
    this.peers = peers;
  }

  private withPeers(m: ScrapedMetric): ScrapedMetric {
    if (this.peers === undefined) return m;
    return { name: m.name, help: m.help, type: m.type, get: async () => sumCollected(await m.get(), this.peerValues.get(m.name) ?? []) };
  }

  /** The Prometheus text exposition of every metric. */
  async text(): Promise<{ contentType: string; body: string }> {
    const registry = await this.load();
    if (this.peers !== undefined) {
      const byName = new Map<string, CollectedMetric[]>();
      for (const thread of await this.peers()) for (const m of thread) byName.set(m.name, [...(byName.get(m.name) ?? []), m]);
      this.peerValues = byName;
    }
    return { contentType: registry.contentType, body: await registry.metrics() };
  }

  private bind(labels: { service: string; handler: string }): TargetCells {
    const byOutcome = <O extends string>(family: CellFamily, outcomes: readonly O[]) =>
      Object.fromEntries(outcomes.map((outcome) => [outcome, family.cell({ ...labels, outcome })])) as Record<O, Cell>;
    return {
      started: this.f.started.cell(labels),
      completed: byOutcome(this.f.completed, COMPLETIONS),
      attempts: byOutcome(this.f.attempts, ATTEMPTS),
      retries: this.f.retries.cell(labels),
      attemptSeconds: this.f.attemptSeconds.cell(labels),
      invocationSeconds: this.f.invocationSeconds.cell(labels),
    };
  }

  private register(m: ScrapedMetric): void {
    assert(this.registry === undefined, () => `metric ${m.name} registered after prom-client was loaded`);
    this.scraped.push(m);
  }
}
