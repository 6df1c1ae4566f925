import type { FastifyInstance } from 'fastify';
import { createAdminServer, createQueryEngine } from './admin/server.js';
import { startPgServer, type PgServer } from './admin/pgwire.js';
import type { QueryEngine } from './admin/query/engine.js';
import { splitAddress, type ClusterConfig, type Config } from './config/index.js';
import { createLogger, type Logger } from './common/logger.js';
import { KeelError } from './errors/index.js';
import { assert } from './common/assert.js';
import { createIngressServer } from './ingress/server.js';
import { Invoker } from './invoker/index.js';
import { endpointClientFor, type EndpointClient } from './endpoint/client.js';
import { signerFor, type RequestSigner } from './endpoint/identity.js';
import { Registry } from './metadata/registry.js';
import { stateCacheBytesPerPartition, storeWriteObserver, Worker, type PartitionsOpened } from './partition/worker.js';
import { LocalGateway } from './partition/gateway.js';
import { PartitionThreads } from './threads/partition-threads.js';
import { ThreadedIntrospection } from './threads/introspection.js';
import { ClusterNode, type ClusterHooks, type Follower } from './cluster-node.js';
import { PartitionFollower } from './partition/catch-up.js';
import { Snapshotter } from './partition/snapshotter.js';
import { GroupWriter } from './storage/group-writer.js';
import { RemoteAppender, serveAppends } from './cluster-append.js';
import { attachAtLeader, forwardToLeader, forwardWhenStandby, routePgQueries } from './forwarding.js';
import type { PartitionRouting } from './ingress/edge.js';
import { KafkaLog, type KafkaLogClient } from './log/kafka-log.js';
import { isTransientKafkaError } from './log/kafkajs.js';
import { WorkerIntrospection } from './admin/partition-source.js';
import { sampleQueues } from './admin/queue-metrics.js';
import { ConfiguredSchedules } from './admin/schedules.js';
import { upgradeWorkerStore } from './storage/upgrade.js';
import { openWorkerStore, workerStoreOptions, WORKER_FORMAT_VERSION, type Db, type StateWrite } from './storage/store.js';
import type { PartitionState } from './partition/state.js';
import { logTable } from './storage/tables/log.js';
import { SubscriptionManager } from './subscriptions/manager.js';
import { workerPartitions } from './subscriptions/partitions.js';
import { createTracing, KeelMetrics, type Telemetry } from './telemetry/index.js';

const METRICS_LOAD_DELAY_MS = 1_000;
const ENGINE_START_DELAY_MS = 500;

/** A running Keel node: store, registry, partitions, invoker, ingress, admin and SQL servers. */
export class KeelServer {
  private constructor(
    readonly config: Config,
    readonly logger: Logger,
    readonly db: Db,
    readonly registry: Registry,
    readonly worker: Worker,
    readonly subscriptions: SubscriptionManager,
    readonly invoker: Invoker,
    readonly endpoints: EndpointClient,
    readonly ingress: FastifyInstance,
    readonly admin: FastifyInstance,
    readonly telemetry: Telemetry,
    readonly engine: QueryEngine,
    readonly pgsql: PgServer,
    /** In a cluster: this node's role, and the Kafka log and membership behind it. */
    readonly cluster: ClusterNode | undefined,
    /** worker.threads > 1: the threads serving the partitions. */
    readonly threads: PartitionThreads | undefined,
  ) {}

  /** Without a logger of the caller's, the server's own counts coded warn/error lines (`keel_errors_total`). */
  static async start(config: Config, logger?: Logger): Promise<KeelServer> {
    const metrics = new KeelMetrics({ processMetrics: true });
    logger ??= createLogger(config.log.level, config.log.format, (code) => metrics.error(code));
    // A bad key refuses startup (RT0002) before anything is opened.
    const signer = loadSigner(config, logger);
    // Where a slow start went, for the ready line: ms since the process began, at each step's end.
    const phases_ms: Record<string, number> = { loaded: Math.round(performance.now()) };
    const phase = (name: string) => (phases_ms[name] = Math.round(performance.now()));
    // The store opens (after a crash, LevelDB replays its write-ahead log on the thread pool)
    // while the registry opens and the routes are built; the partitions load once it is open.
    const opening = openStore(config, logger);
    opening.catch(() => {}); // awaited below, or closed when the start fails before that
    let db: Db | undefined;
    let registry: Registry | undefined;
    const tracing = await createTracing(config.tracing.endpoint, logger.child({ component: 'tracing' }));
    const telemetry: Telemetry = { metrics, tracing };
    // What buildServices made, stopped when the start fails after it.
    const made: Made = {};
    try {
      registry = await Registry.open(config, logger.child({ component: 'metadata' }), signer !== undefined ? { signer } : {});
      phase('registry_opened');
      const known = registry;
      metrics.knownTarget = (service, handler) => known.handler(service, handler) !== undefined;
      const { threads, worker, invoker, endpoints, subscriptions, routing, ingress, admin, engine, applySchedules } = await buildServices(config, logger, telemetry, known, signer, made);
      phase('routes_built');
      db = await opening;
      phase('store_opened');
      const opened = db;
      worker.useStore(opened);
      const openPartitions = partitionOpener(config, worker, opened, known, applySchedules);
      const cluster = config.cluster === undefined ? undefined : clusterNode(config, config.cluster, logger, metrics, opened, { ingress, admin }, routing, worker, {
        open: (log, partitions) => openPartitions(log, partitions),
        close: (partition) => worker.closePartition(partition),
        startWork: async (log) => {
          worker.start(invoker);
          subscriptions.start();
          return startSnapshots(config.cluster!, opened, worker, log, logger);
        },
      });
      // In a cluster the partitions open once this node is chosen to lead them (after it listens).
      if (threads !== undefined) {
        // Each thread brings its partitions' rule books up to date as it opens them (thread.ts).
        await threads.start(known);
        await applySchedules();
      } else if (cluster === undefined) {
        const answer = await openPartitions();
        if ('failure' in answer) throw answer.failure;
      }
      phase('partitions_loaded');
      const pgsql = await listenAll(config, logger, { ingress, admin }, engine, cluster);
      phase('listening');
      if (cluster === undefined) {
        worker.start(invoker);
        threads?.go();
        // Consumers start once the partitions have recovered: positions are read from them.
        subscriptions.start();
      } else {
        await cluster.start({ db, path: config.worker.storage_db.path });
      }
      startInBackground(engine, metrics, logger);
      logReady(config, logger, phases_ms, pgsql, cluster);
      return new KeelServer(config, logger, db, registry, worker, subscriptions, invoker, endpoints, ingress, admin, telemetry, engine, pgsql, cluster, threads);
    } catch (err) {
      await made.engine?.close().catch(() => {});
      await made.threads?.stop().catch(() => {});
      await tracing.shutdown().catch(() => {});
      await registry?.close().catch(() => {});
      await (db ?? (await opening.catch(() => undefined)))?.close().catch(() => {});
      throw err;
    }
  }

  async stop(): Promise<void> {
    const timed = async (what: string, work: Promise<unknown>): Promise<void> => {
      const started = performance.now();
      await work;
      this.logger.debug({ took_ms: Math.round(performance.now() - started) }, `shutdown: ${what}`);
    };
    await Promise.allSettled([
      timed('snapshots stopped', this.cluster?.stopWork() ?? Promise.resolve()),
      timed('ingress closed', this.ingress.close()),
      timed('admin closed', this.admin.close()),
      timed('subscriptions stopped', this.subscriptions.stop()),
      timed('pgsql closed', this.pgsql.close()),
      timed('query engine closed', this.engine.close()),
    ]);
    await timed('partitions closed', this.worker.stop());
    await timed('partition threads stopped', this.threads?.stop() ?? Promise.resolve());
    await timed('left the cluster', this.cluster?.stop() ?? Promise.resolve());
    this.endpoints.close();
    await this.registry.close();
    await this.db.close();
    // Spans still waiting for their batch are exported before the process goes.
    await this.telemetry.tracing.shutdown().catch((err) => this.logger.warn({ err, code: 'KEEL0601' }, 'cannot export the last traces'));
  }
}

/** What a start that fails after buildServices made them must stop. */
interface Made {
  engine?: QueryEngine;
  threads?: PartitionThreads;
}

/** What KeelServer.start builds before the store is open. */
interface Services {
  threads: PartitionThreads | undefined;
  worker: Worker;
  invoker: Invoker;
  endpoints: EndpointClient;
  subscriptions: SubscriptionManager;
  routing: { ingress: PartitionRouting; admin: PartitionRouting };
  ingress: FastifyInstance;
  admin: FastifyInstance;
  engine: QueryEngine;
  /** Applies the schedules the configuration declares (never rejects: a failure is logged). */
  applySchedules: () => Promise<void>;
}

/**
 * The partitions' worker (or threads), the invoker, the subscriptions, the ingress and admin
 * servers and the query engine, wired to the registry; built while the store opens. What must be
 * stopped should the start fail later goes into `made` as soon as it exists.
 */
async function buildServices(config: Config, logger: Logger, telemetry: Telemetry, registry: Registry, signer: RequestSigner | undefined, made: Made): Promise<Services> {
  const metrics = telemetry.metrics;
  const threads = partitionThreads(config, logger);
  made.threads = threads;
  // With partition threads, this thread's worker serves none (the threads do).
  const worker = new Worker(config, logger.child({ component: 'worker' }), telemetry, threads !== undefined ? [] : undefined);
  const endpoints = endpointClientFor(config, signer);
  const invoker = new Invoker(config, registry, endpoints, logger.child({ component: 'invoker' }), telemetry);
  registry.onDeploymentLimits(() => invoker.limitsChanged());
  sampleQueues(metrics, config, worker, invoker, endpoints);
  if (threads !== undefined) metrics.addPeers(() => threads.metrics());
  const partitions = threads?.subscriptionPartitions() ?? workerPartitions(worker);
  const subscriptions = new SubscriptionManager({ config, registry, partitions, logger: logger.child({ component: 'subscriptions' }) });
  // Filled in by the cluster node when the partitions are spread (requests for partitions led elsewhere go there).
  const routing: { ingress: PartitionRouting; admin: PartitionRouting } = { ingress: {}, admin: {} };
  const ingress = await createIngressServer({ config, registry, partitions: threads ?? new LocalGateway(worker), logger, telemetry, routing: routing.ingress });
  const introspection = threads !== undefined ? new ThreadedIntrospection(threads, subscriptions) : new WorkerIntrospection(worker, subscriptions);
  // What holds the partitions' rule books and failures: the threads, or this thread's worker.
  const served = threads ?? worker;
  const serving = () => (threads !== undefined ? threads.serving : worker.processors.length > 0);
  const engine = (made.engine = createQueryEngine(config, registry, () => introspection, logger));
  // The rule book reaches the partitions: with each change made here (the rule routes wait
  // for it), each change another node of a cluster made, and when the partitions open.
  const admin = await createAdminServer({ config, registry, logger, introspection, engine, failures: () => served.failures(), metrics, endpoints, applyLimitRules: (book) => served.setLimitRules(book), routing: routing.admin });
  registry.onRemoteLimitRules((book) => {
    if (worker.processors.length === 0) return; // a standby: its partitions get the book when it becomes active
    worker.setLimitRules(book).catch((err: unknown) => logger.warn({ err, code: (err as KeelError).code ?? 'RT0006', version: book.version }, 'cannot hand the rule book to the partitions'));
  });
  const configured = new ConfiguredSchedules({ config, registry }, logger.child({ component: 'schedules' }));
  const applySchedules = () => configured.apply(introspection).catch((err: unknown) => logger.warn({ err, code: (err as KeelError).code ?? 'RT0006' }, 'cannot apply the schedules of the configuration'));
  registry.onServicesChanged(() => {
    if (!serving()) return; // not open yet, or a standby: the book goes with the opening
    served.setStateTtls(registry.stateTtls()).catch((err: unknown) => logger.warn({ err, code: (err as KeelError).code ?? 'RT0006' }, 'cannot hand the state TTLs to the partitions'));
    // A declared schedule whose service was not registered yet applies now.
    void applySchedules();
  });
  return { threads, worker, invoker, endpoints, subscriptions, routing, ingress, admin, engine, applySchedules };
}

/**
 * A cluster node: a standby forwards requests to the active node; `GET /cluster` (admin) says
 * where this node stands. A node deposed while it leads partitions exits (see cluster-node.ts).
 */
function clusterNode(config: Config, cluster: ClusterConfig, logger: Logger, metrics: KeelMetrics, db: Db, servers: { ingress: FastifyInstance; admin: FastifyInstance }, routing: { ingress: PartitionRouting; admin: PartitionRouting }, worker: Worker, partitions: Pick<ClusterHooks, 'open' | 'close' | 'startWork'>): ClusterNode {
  const stop = (code: string, reason: string): void => {
    logger.fatal({ code, node: cluster.node_name }, `this node stops: ${reason}`);
    process.exit(1);
  };
  const deposed = (reason: string): void => stop('KEEL0802', reason);
  const refused = (err: KeelError): void => stop(err.code, err.message);
  const stopped = () => worker.failures().map((f) => ({ partition: f.partition, reason: f.reason }));
  const writer = new GroupWriter(db, storeWriteObserver(metrics));
  const follow = async (log: KafkaLogClient, followed: number[]): Promise<Follower[]> => {
    const cache_bytes = stateCacheBytesPerPartition(config);
    const open = (p: number) => KafkaLog.open(db, p, writer, log);
    const logs = await Promise.all(followed.map((p) => open(p)));
    const reads = (p: number) => ({ state: (state: PartitionState | undefined) => worker.setReplica(p, state), observe: (partition: number, writes: readonly StateWrite[]) => worker.observeBatch(partition, writes) });
    return logs.map((l) => new PartitionFollower(db, l, () => open(l.partition), cache_bytes, logger.child({ component: 'follower' }), reads(l.partition)));
  };
  const node = new ClusterNode(config, cluster, logger.child({ component: 'cluster' }), { ...partitions, follow, deposed, refused, stopped });
  if (cluster.spread_partitions) {
    routing.ingress.elsewhere = (partition, req, reply) => forwardToLeader(req, reply, partition, node, node.peers, 'ingress', logger);
    routing.admin.elsewhere = (partition, req, reply) => forwardToLeader(req, reply, partition, node, node.peers, 'admin', logger);
    routing.ingress.attach = (partition, id, req, reply) => attachAtLeader(req, reply, partition, id, node, node.peers, logger);
    worker.setRemote(new RemoteAppender(node, node.peers, config.admin.auth_tokens[0], logger.child({ component: 'remote-append' })));
    serveAppends(servers.admin, worker, cluster.auth_tokens);
  } else {
    forwardWhenStandby(servers.ingress, node.route('ingress'), node.peers, logger);
    forwardWhenStandby(servers.admin, node.route('admin'), node.peers, logger);
  }
  const lag = node.watchLag(async (p) => (await logTable.readCursor(db, p))?.offset);
  servers.admin.get('/cluster', async () => {
    const status = node.status((p) => worker.processor(p)?.applied_position);
    const lags = await lag.refresh().catch(() => lag.current);
    return { ...status, partitions: status.partitions.map((p) => ({ ...p, ...lags[p.partition] })) };
  });
  metrics.sampleCluster(() => ({ ...node.sample(), lag: lag.current.map((l) => [l.partition, l.lag_offsets] as [number, number]) }));
  return node;
}

/** An active node's snapshots of its partitions, and the trimming of their logs (when cluster.snapshot_path is set). */
function startSnapshots(cluster: ClusterConfig, db: Db, worker: Worker, log: KafkaLogClient, logger: Logger): (() => Promise<void>) | undefined {
  const store = log.settings.snapshots;
  if (store === undefined) return undefined;
  const partitions = () => worker.processors.map((p) => ({ partition: p.partition, applied_position: p.applied_position }));
  const snapshotter = new Snapshotter(db, store, partitions, (p, offset) => log.trim(p, offset), { interval_records: cluster.snapshot_interval_records, kept: cluster.snapshots_kept }, logger.child({ component: 'snapshots' }));
  snapshotter.start();
  return () => snapshotter.stop();
}

/** The worker store, opened (and brought to this format) while the registry opens and the routes are built. */
function openStore(config: Config, logger: Logger): Promise<Db> {
  return openWorkerStore(config.worker.storage_db.path, { ...workerStoreOptions(config), upgrade: upgradeLogged(logger, config.worker.storage_db.path) });
}

/**
 * Opens partitions of this process's worker (all, or a cluster node's share) and brings their rule
 * books, TTLs and declared schedules up to date. Never throws: what opened is led here whatever
 * failed after it (a cluster node decides from the answer).
 */
function partitionOpener(config: Config, worker: Worker, db: Db, registry: Registry, applySchedules: () => Promise<void>) {
  return async (log?: KafkaLogClient, partitions?: number[]): Promise<PartitionsOpened> => {
    const answer = await worker.open(db, log, partitions).catch((err: unknown): PartitionsOpened => ({ opened: (partitions ?? worker.allPartitions()).filter((p) => worker.leads(p)), failure: err }));
    // A partition whose log has an older rule book than the metadata (a crash between a
    // change's commit and its append, or a change made while this node stood by) catches up
    // before anything is served: those that opened, though another failed. A catch-up refused
    // (another node announced a later epoch meanwhile) is the answer's failure.
    try {
      await worker.setLimitRules(registry.limitRules());
      await worker.setStateTtls(registry.stateTtls(), { onlyWhereDiffers: true });
      await applySchedules();
    } catch (err) {
      answer.failure ??= err;
    }
    if (!('failure' in answer)) return answer;
    return { opened: answer.opened, failure: openFailure(config, answer.failure) };
  };
}

/**
 * Why partitions did not open, as a KeelError: the cluster log out of reach for now (a cluster
 * node tries again), or a read that fails its checksum or state that breaks an invariant (never
 * run on it).
 */
function openFailure(config: Config, failure: unknown): KeelError {
  if (failure instanceof KeelError) return failure;
  const why = (failure as Error)?.message ?? String(failure);
  if (isTransientKafkaError(failure)) return new KeelError('KEEL0801', `cannot take over the partitions: the cluster log cannot be reached now: ${why}`, { cause: failure });
  return new KeelError('KEEL0015', `cannot load the partitions from ${config.worker.storage_db.path}: ${why}`, { cause: failure });
}

/** The ingress, admin and SQL servers listen; if one cannot, those already listening close. */
async function listenAll(config: Config, logger: Logger, servers: { ingress: FastifyInstance; admin: FastifyInstance }, engine: QueryEngine, cluster: ClusterNode | undefined): Promise<PgServer> {
  await listen(servers.ingress, config.ingress.bind_address, 'ingress');
  try {
    await listen(servers.admin, config.admin.bind_address, 'admin');
    // With the partitions spread, every node's engine answers for the cluster (it follows every partition).
    const sql = cluster === undefined || config.cluster!.spread_partitions ? engine : routePgQueries(engine, cluster.route('admin'), cluster.peers, config.admin.auth_tokens[0]);
    return await startPgServer(config.admin.query_engine, sql, logger);
  } catch (err) {
    await Promise.allSettled([servers.ingress.close(), servers.admin.close()]);
    throw err;
  }
}

/**
 * A query engine kept for good (idle_timeout 0) boots in a process of its own a moment after the
 * server answers (its boot would take CPU from the first requests and from recovery on a small
 * machine), and its copy of the statuses loads in the background; a query before that, or any
 * query with an idle_timeout, starts it at once (QueryEngine.boot). prom-client loads a
 * second after the start, out of the way of the first requests; a scrape before that loads it itself.
 */
function startInBackground(engine: QueryEngine, metrics: KeelMetrics, logger: Logger): void {
  setTimeout(() => engine.boot(), ENGINE_START_DELAY_MS).unref();
  setTimeout(() => metrics.load().catch((err) => logger.error({ err, code: 'RT0006' }, 'cannot load the metrics registry')), METRICS_LOAD_DELAY_MS).unref();
}

/** The "keel is ready" line: where the start's time went, and what this server is. */
function logReady(config: Config, logger: Logger, phases_ms: Record<string, number>, pgsql: PgServer, cluster: ClusterNode | undefined): void {
  const cpu = process.cpuUsage();
  logger.info(
    {
      startup_ms: Math.round(performance.now()),
      startup_cpu_ms: Math.round((cpu.user + cpu.system) / 1000),
      startup_phases_ms: phases_ms,
      code_cache: (globalThis as Record<symbol, unknown>)[Symbol.for('keel.code_cache')] ?? 'none',
      // glibc's arenas keep what LevelDB's reads on libuv's threads freed: `make run` sets 2.
      malloc_arena_max: process.env.MALLOC_ARENA_MAX ?? 'glibc default',
      ingress: config.ingress.bind_address,
      admin: config.admin.bind_address,
      pgsql: pgsql.address,
      partitions: config.worker.partitions,
      threads: config.worker.threads,
      fsync: config.worker.storage_db.fsync,
      ...(cluster !== undefined ? { cluster: { node: cluster.self.node, brokers: config.cluster!.brokers, log_topic: config.cluster!.log_topic } } : {}),
      ...(config.tracing.endpoint ? { tracing: config.tracing.endpoint } : {}),
    },
    'keel is ready',
  );
}

/** worker.threads > 1: the threads that will serve the partitions (started once the store is open); not in a cluster, yet. */
function partitionThreads(config: Config, logger: Logger): PartitionThreads | undefined {
  if (config.worker.threads === 1) return undefined;
  assert(config.cluster === undefined, () => 'worker.threads > 1 in a cluster: the configuration refuses it');
  return new PartitionThreads(config, logger);
}

/** The request identity key, when configured; its public key is logged for the endpoints' identityKeys. */
function loadSigner(config: Config, logger: Logger): RequestSigner | undefined {
  const signer = signerFor(config);
  if (signer === undefined) return undefined;
  logger.info(
    { kid: signer.publicKey, path: config.worker.invoker.request_identity_private_key_pem_file },
    `Loaded request identity key: requests to endpoints are signed; endpoints verify them with identityKeys: ["${signer.publicKey}"]`,
  );
  return signer;
}

async function listen(app: FastifyInstance, address: string, what: string): Promise<void> {
  const { host, port } = splitAddress(address);
  try {
    await app.listen({ host, port });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL' || code === 'EPERM') {
      throw new KeelError('RT0004', `cannot bind the ${what} address ${address}: ${code === 'EADDRINUSE' ? 'address in use' : code === 'EADDRNOTAVAIL' ? 'address not available' : 'permission denied'}`, { cause: err });
    }
    throw err;
  }
}

/** The store's upgrade, with a line before and after: it rewrites tables, which takes a while on a large store. */
function upgradeLogged(logger: Logger, path: string): (db: Db, from: number) => Promise<void> {
  return async (db, from) => {
    const started = performance.now();
    logger.info({ path, from, to: WORKER_FORMAT_VERSION }, 'upgrading the worker storage to this version\'s format (once; the server starts after it)');
    await upgradeWorkerStore(db, from);
    logger.info({ path, from, to: WORKER_FORMAT_VERSION, took_ms: Math.round(performance.now() - started) }, 'worker storage upgraded');
  };
}
