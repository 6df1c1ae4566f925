// The schema registry: deployments, services with revisions and handlers, folded from the
// metadata log; registration rules META0004–META0017.

import type { Config, KafkaCluster } from '../config/index.js';
import { isSubscriptionId, newSubscriptionId, validateSubscription } from './subscriptions.js';
import { formatDuration } from '../common/units.js';
import { assert, InvariantError } from '../common/assert.js';
import type { Logger } from '../common/logger.js';
import { newDeploymentId } from '../common/ids.js';
import {
  deleteRules,
  EMPTY_RULE_BOOK,
  MAX_RULES,
  RulePreconditionFailed,
  upsertRules,
  type DeleteRule,
  type LimitRule,
  type RuleBook,
  type UpsertRule,
} from '../common/limit-rules.js';
import { KeelError, keelError } from '../errors/index.js';
import type { RequestSigner } from '../endpoint/identity.js';
import { discover as defaultDiscover, normaliseUri, type DiscoveryTarget } from './discovery.js';
import { parseLambdaArn } from '../endpoint/lambda.js';
import { KafkaMetaLog } from './kafka-meta-log.js';
import { MetaLog, type MetadataLog, type MetaRecord } from './store.js';
import type {
  DeploymentSchema,
  DiscoveredEndpoint,
  DiscoveredService,
  HandlerSchema,
  RegisterRequest,
  ServiceChange,
  ServiceInfo,
  ServiceSchema,
  SubscriptionRequest,
  SubscriptionSchema,
  UpdateRequest,
} from './types.js';

export type {
  DeploymentSchema,
  DiscoveredEndpoint,
  DiscoveredService,
  HandlerSchema,
  HandlerType,
  ProtocolType,
  RegisterRequest,
  RetryPolicyOverride,
  ServiceInfo,
  ServiceSchema,
  ServiceType,
  SubscriptionRequest,
  SubscriptionSchema,
  UpdateRequest,
} from './types.js';

/** What changed about the subscriptions: a listener starts or stops consuming. */
export type SubscriptionEvent = { kind: 'added'; subscription: SubscriptionSchema } | { kind: 'removed'; id: string };

export interface RegistryOptions {
  /** Replaces the discovery client (tests, function platforms later). */
  discover?: (target: DiscoveryTarget) => Promise<DiscoveredEndpoint>;
  discoveryTimeoutMs?: number;
  /** Signs discovery requests (request identity v1). */
  signer?: RequestSigner;
}

/** Reserved service names: `restate…` (any case) and `openapi`. */
export function isReservedServiceName(name: string): boolean {
  return /^restate/i.test(name) || name.toLowerCase() === 'openapi';
}

function stable(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

function strip(s: ServiceSchema | DiscoveredService): DiscoveredService {
  const { revision: _r, deployment_id: _d, ...rest } = s as ServiceSchema;
  return rest;
}

function sameDiscovered(d: DeploymentSchema, e: DiscoveredEndpoint): boolean {
  return (
    d.protocol_type === e.protocol_type &&
    d.min_protocol_version === e.min_protocol_version &&
    d.max_protocol_version === e.max_protocol_version &&
    d.invocation_limit === e.invocation_limit &&
    stable(d.services.map(strip)) === stable(e.services.map(strip))
  );
}

/** Rules named in the log line of a change (a change may carry 10,000). */
const LOGGED_RULES = 10;

/** A rule book change, its failed precondition as the API answers it (409 KEEL0911, Restate's words). */
function checked<T>(change: () => T): T {
  try {
    return change();
  } catch (err) {
    if (err instanceof RulePreconditionFailed) throw new KeelError('KEEL0911', err.message);
    throw err;
  }
}

function notFound(id: string): KeelError {
  return keelError('KEEL0004', { what: 'deployment', name: id });
}

function checkHeaders(h: unknown): Record<string, string> | undefined {
  if (h === undefined || h === null) return undefined;
  if (typeof h !== 'object' || Array.isArray(h) || Object.values(h).some((v) => typeof v !== 'string')) {
    throw keelError('KEEL0002', { field: 'additional_headers', expected: 'an object mapping header names to string values' });
  }
  for (const name of Object.keys(h)) {
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new KeelError('KEEL0002', `invalid header name '${name}' in additional_headers`);
  }
  return { ...(h as Record<string, string>) };
}

/** The destination fields of a function-platform deployment; 400 on an unqualified or malformed ARN. */
function lambdaDestination(arn: unknown, assumeRole: unknown): { arn: string; assume_role_arn?: string } {
  const parsed = parseLambdaArn(arn);
  if (assumeRole !== undefined && assumeRole !== null && typeof assumeRole !== 'string') {
    throw keelError('KEEL0002', { field: 'assume_role_arn', expected: 'a string' });
  }
  return { arn: parsed.arn, ...(typeof assumeRole === 'string' && assumeRole !== '' ? { assume_role_arn: assumeRole } : {}) };
}

/**
 * Registration-time notes, as Restate reports them on the service: RT0021 when an
 * inactivity_timeout is set on a request-response deployment (it is ignored there), RT0022
 * when a journal_retention exceeds `max_journal_retention` (it is clamped to it).
 */
export function annotate(
  found: DiscoveredEndpoint,
  o: { request_response: boolean; why: string; max_journal_retention_ms: number | undefined },
): DiscoveredEndpoint {
  const services = found.services.map((svc) => {
    const info: ServiceInfo[] = [];
    const s: DiscoveredService = { ...svc };
    delete s.info;
    const max = o.max_journal_retention_ms;
    if (o.request_response) {
      if (s.inactivity_timeout_ms !== undefined) {
        info.push({
          code: 'RT0021',
          message:
            `The inactivity_timeout (${formatDuration(s.inactivity_timeout_ms)}) of service '${s.name}' is ignored: ` +
            `the deployment runs in request-response mode (${o.why})`,
        });
      }
      for (const h of s.handlers) {
        if (h.inactivity_timeout_ms === undefined) continue;
        info.push({
          code: 'RT0021',
          message:
            `The inactivity_timeout (${formatDuration(h.inactivity_timeout_ms)}) of handler '${s.name}/${h.name}' is ignored: ` +
            `the deployment runs in request-response mode (${o.why})`,
        });
      }
    }
    if (max !== undefined) {
      const clamp = (what: string, v: number) =>
        info.push({
          code: 'RT0022',
          message:
            `The journal_retention (${formatDuration(v)}) of ${what} exceeds the configured max_journal_retention ` +
            `(${formatDuration(max)}) and was clamped to it`,
        });
      if (s.journal_retention_ms !== undefined && s.journal_retention_ms > max) {
        clamp(`service '${s.name}'`, s.journal_retention_ms);
        s.journal_retention_ms = max;
      }
      s.handlers = s.handlers.map((h) => {
        if (h.journal_retention_ms === undefined || h.journal_retention_ms <= max) return h;
        clamp(`handler '${s.name}/${h.name}'`, h.journal_retention_ms);
        return { ...h, journal_retention_ms: max };
      });
    }
    if (info.length > 0) s.info = info;
    return s;
  });
  return { ...found, services };
}

export class Registry {
  private readonly byId = new Map<string, DeploymentSchema>();
  private readonly maxRevision = new Map<string, number>();
  private latest = new Map<string, ServiceSchema>();
  private readonly subs = new Map<string, SubscriptionSchema>();
  private readonly subscriptionListeners = new Set<(e: SubscriptionEvent) => void>();
  private rules: RuleBook = EMPTY_RULE_BOOK;
  private readonly ruleListeners = new Set<(book: RuleBook) => void>();
  private readonly serviceListeners = new Set<() => void>();
  /** Keel's own: deployment id → the most attempts it may run at once (PUT /deployments/{id}/limits). */
  private readonly deploymentLimits = new Map<string, number>();
  private readonly deploymentLimitListeners = new Set<(arg: undefined) => void>();
  /**
   * Every record applied, in order: what a replica starts from. Bounded as the metadata log is
   * (every record it holds, which `open` reads whole): a record per registration, update,
   * removal, limit and rule-book change an operator made.
   */
  private readonly applied: MetaRecord[] = [];
  private readonly recordListeners = new Set<(rec: MetaRecord) => void>();
  /** A replica's changes come from this process's main registry, which logged them. */
  private replicated = false;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  private changes = 0;
  private catching: Promise<void> | undefined;

  private constructor(
    private readonly log: MetadataLog,
    private readonly logger: Logger,
    private readonly discoverFn: (target: DiscoveryTarget) => Promise<DiscoveredEndpoint>,
    private readonly maxJournalRetentionMs: number | undefined,
    private readonly clusters: KafkaCluster[] = [],
  ) {}

  static async open(config: Config, logger: Logger, opts: RegistryOptions = {}): Promise<Registry> {
    const { log, records }: { log: MetadataLog; records: MetaRecord[] } =
      config.cluster !== undefined ? await KafkaMetaLog.open(config.cluster, logger) : await MetaLog.open(config.meta.storage_path);
    const discoverOptions = {
      own: [
        { name: 'ingress', address: config.ingress.bind_address },
        { name: 'admin', address: config.admin.bind_address },
        { name: 'SQL (PostgreSQL wire)', address: config.admin.query_engine.pgsql_bind_address },
      ],
      timeoutMs: opts.discoveryTimeoutMs ?? config.admin.discovery_timeout_ms,
      connectTimeoutMs: config.worker.invoker.connect_timeout_ms,
      ...(opts.signer !== undefined ? { signer: opts.signer } : {}),
    };
    const discoverFn = opts.discover ?? ((t: DiscoveryTarget) => defaultDiscover(t, discoverOptions));
    const reg = new Registry(log, logger, discoverFn, config.max_journal_retention_ms, config.ingress.kafka_clusters ?? []);
    try {
      for (const r of records) reg.apply(r);
    } catch (err) {
      await log.close().catch(() => {});
      throw new KeelError(
        'META0005',
        `meta storage at ${config.meta.storage_path} cannot be applied (${(err as Error).message}); ` +
          `wipe meta.storage_path and register the deployments again, in their earlier order`,
      );
    }
    reg.recompute();
    log.follow?.((rec) => reg.applyRemote(rec));
    logger.info({ deployments: reg.byId.size, services: reg.latest.size, subscriptions: reg.subs.size, limit_rules: reg.rules.rules.length }, 'schema registry opened');
    return reg;
  }

  /**
   * A read-only copy, for partitions served on another thread (issue 23): `records` are the main
   * registry's `history()`, and `follow` hands over each record it applies after, in order. Its
   * listeners fire as a cluster node's do for another node's changes; it discovers and writes nothing.
   */
  static replica(config: Config, logger: Logger, records: readonly MetaRecord[], follow: (apply: (rec: MetaRecord) => void) => () => void): Registry {
    const refuse = (what: string) => async (): Promise<never> => {
      throw new InvariantError(`a replica of the schema registry ${what}: the main registry does`);
    };
    let detach = () => {};
    // Closing the replica stops it following.
    const log: MetadataLog = { append: refuse('appends nothing'), close: async () => detach() };
    const reg = new Registry(log, logger, refuse('discovers nothing'), config.max_journal_retention_ms, config.ingress.kafka_clusters ?? []);
    reg.replicated = true;
    for (const r of records) reg.apply(r);
    reg.recompute();
    detach = follow((rec) => reg.applyRemote(rec));
    return reg;
  }

  /**
   * Every record applied so far, in order (a replica's start; a copy). Taken together with
   * `onRecord`, with no await between, a replica misses and repeats nothing.
   */
  history(): MetaRecord[] {
    return [...this.applied];
  }

  /** Called with each record applied from now on (committed here, or another node's), in order; returns the stop function. */
  onRecord(listener: (rec: MetaRecord) => void): () => void {
    this.recordListeners.add(listener);
    return () => this.recordListeners.delete(listener);
  }

  /**
   * In a cluster: takes in what other nodes changed up to now (a deployment registered through
   * another node a moment ago), instead of at the next look at the metadata log. Failures are
   * logged: the caller answers from what it has.
   */
  catchUp(): Promise<void> {
    if (this.log.catchUp === undefined) return Promise.resolve();
    // One read at a time: requests arriving meanwhile wait for the one under way.
    this.catching ??= this.log
      .catchUp()
      .catch((err: unknown) => this.logger.warn({ err, code: 'KEEL0801' }, 'cannot read the cluster metadata now'))
      .finally(() => (this.catching = undefined));
    return this.catching;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.catch(() => {});
    await this.log.close();
  }

  service(name: string): ServiceSchema | undefined {
    return this.latest.get(name);
  }

  handler(service: string, handler: string): { service: ServiceSchema; handler: HandlerSchema } | undefined {
    const svc = this.latest.get(service);
    const h = svc?.handlers.find((x) => x.name === handler);
    return svc && h ? { service: svc, handler: h } : undefined;
  }

  deployment(id: string): DeploymentSchema | undefined {
    return this.byId.get(id);
  }

  /** Changes committed since the registry opened: while it stays the same, so do the deployments and services. */
  get version(): number {
    return this.changes;
  }

  deployments(): DeploymentSchema[] {
    return [...this.byId.values()];
  }

  services(): ServiceSchema[] {
    return [...this.latest.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  register(req: RegisterRequest): Promise<{ created: boolean; deployment: DeploymentSchema }> {
    return this.serial(() => this.doRegister(req));
  }

  updateInPlace(id: string, req: UpdateRequest): Promise<DeploymentSchema> {
    return this.serial(() => this.doUpdate(id, req));
  }

  remove(id: string): Promise<boolean> {
    return this.serial(async () => {
      if (!this.byId.has(id)) return false;
      await this.commit({ kind: 'deployment_removed', id });
      this.logger.info({ deployment: id }, 'deployment removed');
      return true;
    });
  }

  kafkaClusters(): KafkaCluster[] {
    return this.clusters;
  }

  subscription(id: string): SubscriptionSchema | undefined {
    return this.subs.get(id);
  }

  /** In creation order. */
  subscriptions(): SubscriptionSchema[] {
    return [...this.subs.values()];
  }

  /**
   * Calls `listener` after each subscription is added or removed (once it is durable). Returns
   * the function that removes the listener. A listener that throws is logged, not propagated.
   */
  onSubscriptionChange(listener: (e: SubscriptionEvent) => void): () => void {
    this.subscriptionListeners.add(listener);
    return () => this.subscriptionListeners.delete(listener);
  }

  private notifySubscription(e: SubscriptionEvent): void {
    this.notify(this.subscriptionListeners, e, 'subscription', 'KEEL0701', { subscription: e.kind === 'added' ? e.subscription.id : e.id });
  }

  /** Validates (META0009) and persists a subscription through the metadata log. */
  addSubscription(req: SubscriptionRequest): Promise<SubscriptionSchema> {
    return this.serial(async () => {
      const fields = validateSubscription(req, this.clusters, (name) => this.latest.get(name));
      const subscription: SubscriptionSchema = { id: newSubscriptionId(), ...fields, created_at_ms: Date.now() };
      await this.commit({ kind: 'subscription_added', subscription });
      this.logger.info({ subscription: subscription.id, source: subscription.source, sink: subscription.sink }, 'subscription created');
      this.notifySubscription({ kind: 'added', subscription });
      return subscription;
    });
  }

  removeSubscription(id: string): Promise<boolean> {
    return this.serial(async () => {
      if (!this.subs.has(id)) return false;
      await this.commit({ kind: 'subscription_removed', id });
      this.logger.info({ subscription: id }, 'subscription removed');
      this.notifySubscription({ kind: 'removed', id });
      return true;
    });
  }

  /** The most attempts deployment `id` may run at once, if limited: an operator's limit, else its manifest's. */
  deploymentConcurrency(id: string): number | undefined {
    return this.deploymentLimits.get(id) ?? this.byId.get(id)?.invocation_limit;
  }

  /** Deployment `id`'s limits apart (undefined for an unknown one): the operator's and the manifest's. */
  deploymentLimitsOf(id: string): { operator: number | undefined; manifest: number | undefined } | undefined {
    const d = this.byId.get(id);
    return d === undefined ? undefined : { operator: this.deploymentLimits.get(id), manifest: d.invocation_limit };
  }

  /** Limits (or, with null, unlimits) the attempts a deployment runs at once; KEEL0004 for an unknown one. */
  setDeploymentConcurrency(id: string, concurrency: number | null): Promise<void> {
    return this.serial(async () => {
      if (!this.byId.has(id)) throw new KeelError('KEEL0004', `deployment '${id}' not found`);
      if ((this.deploymentLimits.get(id) ?? null) === concurrency) return;
      await this.commit({ kind: 'deployment_limit_set', id, concurrency });
      this.logger.info({ deployment: id, concurrency }, concurrency === null ? 'deployment concurrency limit removed' : 'deployment concurrency limit set');
    });
  }

  /**
   * Changes the options of service `name`'s latest revision in place (`PATCH /services/{name}`):
   * one `deployment_updated` record with the service changed, so every node applies it alike.
   */
  modifyService(name: string, change: ServiceChange): Promise<ServiceSchema> {
    return this.serial(async () => {
      const s = this.latest.get(name);
      if (!s) throw keelError('KEEL0004', { what: 'service', name });
      if ((change.state_ttl_ms !== undefined || change.state_ttl_on_access !== undefined) && s.ty === 'Service') {
        throw new KeelError('KEEL0002', `a state TTL applies to virtual objects and workflows: '${name}' is a Service, it keeps no state`);
      }
      if (change.state_ttl_on_access !== undefined && change.state_ttl_ms === undefined && s.state_ttl_ms === undefined) {
        throw new KeelError('KEEL0002', `the field state_ttl_from needs a state_ttl: '${name}' has none`);
      }
      if (change.workflow_completion_retention_ms !== undefined && s.ty !== 'Workflow') {
        throw new KeelError('KEEL0002', `modifying retention time for service type ${s.ty} is unsupported`);
      }
      const max = this.maxJournalRetentionMs;
      if (change.journal_retention_ms !== undefined && max !== undefined && change.journal_retention_ms > max) {
        throw new KeelError('KEEL0002', `the field journal_retention (${formatDuration(change.journal_retention_ms)}) exceeds the configured max_journal_retention (${formatDuration(max)})`);
      }
      const next = changedService(s, change);
      const d = this.byId.get(s.deployment_id);
      assert(d !== undefined, () => `service ${name}@${s.revision} of unknown deployment ${s.deployment_id}`);
      const updated: DeploymentSchema = { ...d, services: d.services.map((x) => (x.name === name ? next : x)) };
      await this.commit({ kind: 'deployment_updated', deployment: updated });
      this.logger.info({ service: name, revision: s.revision, ...change }, 'service options changed');
      return this.latest.get(name) ?? next;
    });
  }

  /**
   * What a new revision of service `name` keeps from the latest: its state TTL, which no endpoint
   * declares (a redeployment must not let every object's state live forever again).
   */
  private keptOptions(name: string): Pick<ServiceSchema, 'state_ttl_ms' | 'state_ttl_on_access'> {
    const prev = this.latest.get(name);
    return prev?.state_ttl_ms === undefined ? {} : { state_ttl_ms: prev.state_ttl_ms, state_ttl_on_access: prev.state_ttl_on_access ?? true };
  }

  /** The state TTLs of the services that have one, sorted by service: the book every partition folds with. */
  stateTtls(): Array<{ service: string; ttl_ms: number; on_access: boolean }> {
    return [...this.latest.values()]
      .filter((s) => s.state_ttl_ms !== undefined && s.state_ttl_ms > 0)
      .map((s) => ({ service: s.name, ttl_ms: s.state_ttl_ms!, on_access: s.state_ttl_on_access ?? true }))
      .sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : 0));
  }

  /** Calls `listener` whenever a service changes (here or, in a cluster, on another node): a deployment added, replaced, updated or removed. */
  onServicesChanged(listener: () => void): () => void {
    this.serviceListeners.add(listener);
    return () => this.serviceListeners.delete(listener);
  }

  /** Calls `listener` whenever a deployment's limit changes (here or, in a cluster, on another node). */
  onDeploymentLimits(listener: () => void): () => void {
    this.deploymentLimitListeners.add(listener);
    return () => this.deploymentLimitListeners.delete(listener);
  }

  private notifyDeploymentLimits(): void {
    this.notify(this.deploymentLimitListeners, undefined, 'deployment limit');
  }

  /** Calls each listener with `arg`; one that throws is logged (with `what` it listens to), the others still run. */
  private notify<T>(listeners: ReadonlySet<(arg: T) => void>, arg: T, what: string, code: 'RT0006' | 'KEEL0701' = 'RT0006', fields: Record<string, unknown> = {}): void {
    for (const listener of listeners) {
      try {
        listener(arg);
      } catch (err) {
        this.logger.error({ err, code, ...fields }, `a ${what} listener failed`);
      }
    }
  }

  /** The rule book of flow control (cluster metadata: every node folds the same). */
  limitRules(): RuleBook {
    return this.rules;
  }

  /**
   * Creates or replaces rules, all or none: preconditions are checked against the book as it is
   * when the change runs (KEEL0911), then the cap (KEEL0912). Patterns must be canonical. An
   * upsert that changes nothing commits nothing. Returns the book and each rule as it now is,
   * in request order.
   */
  upsertLimitRules(reqs: readonly UpsertRule[]): Promise<{ book: RuleBook; rules: LimitRule[] }> {
    return this.serial(async () => {
      const result = checked(() => upsertRules(this.rules, reqs, Date.now()));
      if (result.book === this.rules) return result;
      if (result.book.rules.length > MAX_RULES) throw new KeelError('KEEL0912', `rule book is full (${MAX_RULES} rules)`);
      await this.commit({ kind: 'limit_rules_replaced', book: result.book });
      this.logger.info({ version: result.book.version, rules: result.rules.length, first: result.rules.slice(0, LOGGED_RULES).map((r) => `${r.pattern}@v${r.version}`) }, 'limit rules set');
      return result;
    });
  }

  /** Removes rules (KEEL0911 when an expected version does not hold; nothing is removed then). Returns the patterns removed. */
  deleteLimitRules(reqs: readonly DeleteRule[]): Promise<{ book: RuleBook; removed: string[] }> {
    return this.serial(async () => {
      const result = checked(() => deleteRules(this.rules, reqs));
      if (result.book === this.rules) return result;
      await this.commit({ kind: 'limit_rules_replaced', book: result.book });
      this.logger.info({ version: result.book.version, removed: result.removed.length, first: result.removed.slice(0, LOGGED_RULES) }, 'limit rules deleted');
      return result;
    });
  }

  /**
   * Calls `listener` with the rule book whenever a change another node of the cluster committed
   * is applied here (this node's own changes are handed on by whoever made them). Returns the
   * function that removes the listener; one that throws is logged, not propagated.
   */
  onRemoteLimitRules(listener: (book: RuleBook) => void): () => void {
    this.ruleListeners.add(listener);
    return () => this.ruleListeners.delete(listener);
  }

  // ---- internals ----

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(keelError('KEEL0502', { what: 'the schema registry' }));
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => {});
    return run;
  }

  /** A record another node of the cluster appended: applied as this node's own commits are. */
  private applyRemote(rec: MetaRecord): void {
    let applied: boolean;
    try {
      applied = this.apply(rec);
    } catch (err) {
      // Every node applies the same records in the same order: one that fails here failed where it was written.
      this.logger.error({ err, code: 'META0005', kind: rec.kind }, 'a metadata record from another node cannot be applied');
      return;
    }
    this.recompute();
    this.changes++;
    if (applied) this.notify(this.recordListeners, rec, 'metadata record');
    if (rec.kind === 'subscription_added') this.notifySubscription({ kind: 'added', subscription: rec.subscription });
    if (rec.kind === 'subscription_removed') this.notifySubscription({ kind: 'removed', id: rec.id });
    if (rec.kind.startsWith('deployment_')) this.notifyDeploymentLimits();
    if (rec.kind.startsWith('deployment_') && rec.kind !== 'deployment_limit_set') this.notify(this.serviceListeners, undefined, 'services');
    if (!this.replicated) this.logger.info({ kind: rec.kind }, 'metadata changed by another node');
    if (rec.kind === 'limit_rules_replaced' && this.rules === rec.book) this.notify(this.ruleListeners, rec.book, 'limit rules');
  }

  private async commit(rec: MetaRecord): Promise<void> {
    await this.log.append(rec);
    const applied = this.apply(rec);
    this.recompute();
    this.changes++;
    if (applied) this.notify(this.recordListeners, rec, 'metadata record');
    if (rec.kind.startsWith('deployment_') && rec.kind !== 'deployment_limit_set') this.notify(this.serviceListeners, undefined, 'services');
    // Every deployment change may change a limit (an operator's, a manifest's, or one removed
    // with its deployment): attempts parked on one are looked at again.
    if (rec.kind.startsWith('deployment_')) this.notifyDeploymentLimits();
    if (rec.kind === 'limit_rules_replaced' && this.rules !== rec.book) {
      throw new KeelError('META0018', `another node changed the rule book at the same moment (it is now at version ${this.rules.version}); nothing was changed: retry`);
    }
  }

  /** Applies a record; whether it changed anything (a stale rule book is dropped). */
  private apply(rec: MetaRecord): boolean {
    if (!this.applyRecord(rec)) return false;
    this.applied.push(rec);
    return true;
  }

  private applyRecord(rec: MetaRecord): boolean {
    if (rec.kind === 'limit_rules_replaced') {
      // A whole book computed from an older one (in a cluster, another node's change reached the
      // log first) would undo that change: every node reads the records in the same order and
      // drops it alike; its writer answers META0018.
      if (rec.book.version !== this.rules.version + 1) {
        this.logger.warn({ code: 'META0018', version: rec.book.version, current: this.rules.version }, 'a rule book change made from an older book is dropped');
        return false;
      }
      this.rules = rec.book;
      return true;
    }
    if (rec.kind === 'subscription_added') {
      const sub = rec.subscription;
      if (!isSubscriptionId(sub.id)) throw new Error(`malformed subscription id ${JSON.stringify(sub.id)}`);
      if (this.subs.has(sub.id)) throw new Error(`subscription ${sub.id} added twice`);
      this.subs.set(sub.id, sub);
      return true;
    }
    if (rec.kind === 'subscription_removed') {
      this.subs.delete(rec.id);
      return true;
    }
    if (rec.kind === 'deployment_removed') {
      this.byId.delete(rec.id);
      this.deploymentLimits.delete(rec.id);
      return true;
    }
    if (rec.kind === 'deployment_limit_set') {
      if (rec.concurrency === null) this.deploymentLimits.delete(rec.id);
      else this.deploymentLimits.set(rec.id, rec.concurrency);
      return true;
    }
    const d = rec.deployment;
    if (rec.kind === 'deployment_added' && this.byId.has(d.id)) throw new Error(`deployment ${d.id} added twice`);
    if (rec.kind !== 'deployment_added' && !this.byId.has(d.id)) throw new Error(`deployment ${d.id} changed before it was added`);
    for (const s of d.services) {
      if (typeof s.name !== 'string' || !Number.isInteger(s.revision) || !Array.isArray(s.handlers)) throw new Error(`malformed service in deployment ${d.id}`);
      this.maxRevision.set(s.name, Math.max(this.maxRevision.get(s.name) ?? 0, s.revision));
    }
    this.byId.set(d.id, d);
    return true;
  }

  /** Latest revision of each service across the existing deployments. */
  private recompute(): void {
    const latest = new Map<string, ServiceSchema>();
    for (const d of this.byId.values()) {
      for (const s of d.services) {
        const cur = latest.get(s.name);
        if (!cur || s.revision > cur.revision) latest.set(s.name, s);
      }
    }
    this.latest = latest;
  }

  private async runDiscovery(target: DiscoveryTarget): Promise<DiscoveredEndpoint> {
    const found = await this.discoverFn(target);
    for (const s of found.services) {
      if (isReservedServiceName(s.name)) {
        throw new KeelError(
          'META0005',
          `the service name '${s.name}' is reserved: names starting with 'restate' (any case) and 'openapi' cannot be registered`,
        );
      }
    }
    return annotate(found, {
      request_response: found.protocol_type === 'RequestResponse' || target.use_http_11 === true || target.arn !== undefined,
      why: target.arn !== undefined ? 'a function platform (Lambda)' : target.use_http_11 ? 'HTTP/1.1' : 'request-response protocol mode',
      max_journal_retention_ms: this.maxJournalRetentionMs,
    });
  }

  /** RT0021/RT0022 notes of a registration, logged with their code once it is committed. */
  private logInfo(deployment: DeploymentSchema): void {
    for (const s of deployment.services) {
      for (const i of s.info ?? []) {
        const level = i.code === 'RT0022' ? 'warn' : 'info';
        this.logger[level]({ code: i.code, deployment: deployment.id, service: s.name }, `[${i.code}] ${i.message}`);
      }
    }
  }

  private nextRevision(name: string): number {
    return (this.maxRevision.get(name) ?? 0) + 1;
  }

  private async doRegister(req: RegisterRequest): Promise<{ created: boolean; deployment: DeploymentSchema }> {
    const lambda = req.arn !== undefined ? lambdaDestination(req.arn, req.assume_role_arn) : undefined;
    if (!lambda && typeof req.uri !== 'string') throw new KeelError('KEEL0007', 'the field uri (or arn) is required and must be a string');
    const uri = lambda ? lambda.arn : normaliseUri(req.uri!);
    const additional_headers = checkHeaders(req.additional_headers) ?? {};
    const use_http_11 = !lambda && req.use_http_11 === true;
    const force = req.force === true;
    const found = await this.runDiscovery({ uri, additional_headers, use_http_11, ...(lambda ?? {}) });

    const atUri = this.deployments().filter((d) => d.uri === uri);
    if (force && atUri.length >= 2) {
      throw new KeelError(
        'META0017',
        `cannot force-add '${uri}': ${atUri.length} deployments use it (${atUri.map((d) => d.id).join(', ')}); ` +
          `delete one of them with DELETE /deployments/{deployment_id}, then force-register`,
      );
    }
    const same = atUri.find((d) => sameDiscovered(d, found));
    if (same) return { created: false, deployment: same };
    if (!force && atUri.length > 0) {
      throw new KeelError(
        'META0004',
        `the deployment '${atUri[0]!.id}' already uses '${uri}' and discovery returned different metadata; ` +
          `deployments have a unique, immutable URI: register the changed code at a new one, or send "force": true ` +
          `(in-flight invocations may become unrecoverable)`,
      );
    }
    const replacing = force ? atUri[0] : undefined;
    if (!force && req.breaking !== true) this.checkRevisionCompatible(found.services);

    const id = replacing?.id ?? newDeploymentId();
    const metadata = req.metadata && typeof req.metadata === 'object' ? checkHeaders(req.metadata) : undefined;
    const deployment: DeploymentSchema = {
      id,
      uri,
      ...(lambda ?? {}),
      additional_headers,
      use_http_11,
      protocol_type: found.protocol_type,
      min_protocol_version: found.min_protocol_version,
      max_protocol_version: found.max_protocol_version,
      ...(found.sdk_version ? { sdk_version: found.sdk_version } : {}),
      ...(found.invocation_limit !== undefined ? { invocation_limit: found.invocation_limit } : {}),
      ...(metadata ? { metadata } : {}),
      created_at_ms: Date.now(),
      services: found.services.map((s) => ({ ...s, ...this.keptOptions(s.name), revision: this.nextRevision(s.name), deployment_id: id })),
    };
    if (req.dry_run === true) return { created: !replacing, deployment };
    await this.commit(replacing ? { kind: 'deployment_replaced', deployment } : { kind: 'deployment_added', deployment });
    this.logInfo(deployment);
    this.logger.info(
      { deployment: id, uri, services: deployment.services.map((s) => `${s.name}@${s.revision}`), replaced: !!replacing },
      replacing ? 'deployment replaced (force)' : 'deployment registered',
    );
    return { created: !replacing, deployment };
  }

  private checkRevisionCompatible(services: DiscoveredService[]): void {
    for (const s of services) {
      const prev = this.latest.get(s.name);
      if (!prev) continue;
      if (prev.ty !== s.ty) {
        throw new KeelError(
          'META0006',
          `detected a new service revision for '${s.name}' changing the service type from ${prev.ty} (revision ${prev.revision}) to ${s.ty}. ` +
            `Service type cannot be changed across revisions; register with "force": true to override`,
        );
      }
      const removed = prev.handlers.filter((h) => !s.handlers.some((n) => n.name === h.name)).map((h) => h.name);
      if (removed.length > 0) {
        throw new KeelError(
          'META0006',
          `detected a new service revision for '${s.name}' removing the handlers ${removed.map((h) => `'${h}'`).join(', ')} ` +
            `of revision ${prev.revision}. Keep all previous handlers, or register with "force": true to override`,
        );
      }
    }
  }

  private async doUpdate(id: string, req: UpdateRequest): Promise<DeploymentSchema> {
    const old = this.byId.get(id);
    if (!old) throw notFound(id);
    if (req.uri !== undefined && req.uri !== null && typeof req.uri !== 'string') throw keelError('KEEL0002', { field: 'uri', expected: 'a string' });
    const wantsLambda = req.arn !== undefined || (old.arn !== undefined && req.uri === undefined);
    const lambda = wantsLambda
      ? lambdaDestination(req.arn ?? old.arn!, req.assume_role_arn !== undefined ? req.assume_role_arn : old.assume_role_arn)
      : undefined;
    const uri = lambda ? lambda.arn : normaliseUri(req.uri ?? old.uri);
    const additional_headers = checkHeaders(req.additional_headers) ?? old.additional_headers;
    const use_http_11 = lambda ? false : typeof req.use_http_11 === 'boolean' ? req.use_http_11 : old.use_http_11;
    const found = await this.runDiscovery({ uri, additional_headers, use_http_11, ...(lambda ?? {}) });

    const problems: string[] = [];
    if (found.min_protocol_version !== old.min_protocol_version || found.max_protocol_version !== old.max_protocol_version) {
      problems.push(
        `the supported protocol versions change from [${old.min_protocol_version}, ${old.max_protocol_version}] ` +
          `to [${found.min_protocol_version}, ${found.max_protocol_version}]`,
      );
    }
    for (const prev of old.services) {
      const next = found.services.find((s) => s.name === prev.name);
      if (!next) {
        problems.push(`service '${prev.name}' is removed`);
        continue;
      }
      if (next.ty !== prev.ty) problems.push(`service '${prev.name}' changes type from ${prev.ty} to ${next.ty}`);
      const removed = prev.handlers.filter((h) => !next.handlers.some((n) => n.name === h.name)).map((h) => h.name);
      if (removed.length > 0) problems.push(`service '${prev.name}' loses handlers ${removed.map((h) => `'${h}'`).join(', ')}`);
    }
    if (problems.length > 0) {
      throw new KeelError(
        'META0016',
        `cannot update deployment '${id}' in place: ${problems.join('; ')}. Every service must keep its type and handlers, ` +
          `the deployment all its services and exactly the same protocol versions`,
      );
    }
    const updated: DeploymentSchema = {
      ...old,
      uri,
      additional_headers,
      use_http_11,
      protocol_type: found.protocol_type,
      min_protocol_version: found.min_protocol_version,
      max_protocol_version: found.max_protocol_version,
      services: found.services.map((s) => {
        const prev = old.services.find((p) => p.name === s.name);
        return { ...s, ...this.keptOptions(s.name), revision: prev ? prev.revision : this.nextRevision(s.name), deployment_id: id };
      }),
    };
    if (found.sdk_version) updated.sdk_version = found.sdk_version;
    else delete updated.sdk_version;
    if (found.invocation_limit !== undefined) updated.invocation_limit = found.invocation_limit;
    else delete updated.invocation_limit;
    delete updated.arn;
    delete updated.assume_role_arn;
    if (lambda) Object.assign(updated, lambda);
    if (req.dry_run === true) return updated;
    await this.commit({ kind: 'deployment_updated', deployment: updated });
    this.logInfo(updated);
    this.logger.info({ deployment: id, uri }, 'deployment updated in place');
    return updated;
  }
}

function changedService(s: ServiceSchema, c: ServiceChange): ServiceSchema {
  const next: ServiceSchema = { ...s };
  if (c.public !== undefined) next.public = c.public;
  if (c.idempotency_retention_ms !== undefined) next.idempotency_retention_ms = c.idempotency_retention_ms;
  if (c.journal_retention_ms !== undefined) next.journal_retention_ms = c.journal_retention_ms;
  if (c.inactivity_timeout_ms !== undefined) next.inactivity_timeout_ms = c.inactivity_timeout_ms;
  if (c.abort_timeout_ms !== undefined) next.abort_timeout_ms = c.abort_timeout_ms;
  if (c.state_ttl_ms === 0) {
    delete next.state_ttl_ms;
    delete next.state_ttl_on_access;
  } else if (c.state_ttl_ms !== undefined || c.state_ttl_on_access !== undefined) {
    const ttl = c.state_ttl_ms ?? s.state_ttl_ms;
    if (ttl !== undefined) {
      next.state_ttl_ms = ttl;
      next.state_ttl_on_access = c.state_ttl_on_access ?? s.state_ttl_on_access ?? true;
    }
  }
  const wf = c.workflow_completion_retention_ms;
  // Keel keeps a workflow's completion retention on its workflow handler (where the manifest puts it).
  if (wf !== undefined) next.handlers = s.handlers.map((h) => (h.ty === 'Workflow' ? { ...h, workflow_completion_retention_ms: wf } : h));
  return next;
}
