import type { Config, RetryPolicy } from '../config/index.js';
import { InvocationId } from '../common/ids.js';
import { parseLimitKey, restrictedValueError } from '../common/limit-rules.js';
import { assert } from '../common/assert.js';
import type { Logger } from '../common/logger.js';
import type { EndpointClient } from '../endpoint/client.js';
import { Outcome, Then, type AttemptEnded } from '../log/commands.js';
import { resolveTarget } from '../metadata/targets.js';
import type { HandlerSchema, ServiceSchema } from '../metadata/types.js';
import { MAX_LIVE_INVOCATIONS_PER_PARTITION, type AppendOptions, type AttemptHost } from '../partition/processor.js';
import type { Action, InvocationStatus } from '../partition/state.js';
import type { AttemptRunner } from '../partition/worker.js';
import { failedAttempts } from '../partition/fold/attempt-ended.js';
import { MAX_SERVICE_PROTOCOL_VERSION, MIN_SERVICE_PROTOCOL_VERSION } from '../protocol/versions.js';
import { standaloneTelemetry, type TargetCells, type Telemetry } from '../telemetry/index.js';
import Queue from 'yocto-queue';
import { Attempt, type AttemptDeployment, type AttemptFailure } from './attempt.js';
import { decideRetry, retryAfter } from './retry.js';
import { LocalSlots, type DeploymentSlots } from './deployment-slots.js';

/**
 * How an attempt's messages are appended: what they make visible leaves as actions of their
 * batch, which sync it when they must (see AppendOptions). One object for every message.
 */
const ATTEMPT_MESSAGE: AppendOptions = Object.freeze({ durable: false });

/** What the invoker needs of the schema registry. */
export interface DeploymentLookup {
  deployment(id: string): (AttemptDeployment & { min_protocol_version: number; max_protocol_version: number }) | undefined;
  /** The most attempts a deployment may run at once (an operator's PUT /deployments/{id}/limits), if limited. */
  deploymentConcurrency?(id: string): number | undefined;
  service(name: string): ServiceSchema | undefined;
  handler(service: string, handler: string): { service: ServiceSchema; handler: HandlerSchema } | undefined;
}

interface Queued {
  host: AttemptHost;
  id: string;
  epoch: number;
  /** The limited deployment it waited for, once a freed slot there let it go: that turn is its. */
  parkedOn?: string;
}


/**
 * Runs invocation attempts against service endpoints, at most
 * `concurrent_invocations_limit` at once, and at most a deployment's own limit against it; the
 * others wait their turn in arrival order (those of a deployment at its limit aside, so they do
 * not hold back the others).
 */
export class Invoker implements AttemptRunner {
  private readonly live = new Map<string, Attempt>();
  // A linked queue: O(1) at both ends however many attempts wait (an array's shift() is O(n)).
  private readonly waiting = new Queue<Queued>();
  /** Per limited deployment: attempts waiting for one of its slots (bounded with `waiting` by the live limit). */
  private readonly parked = new Map<string, Queue<Queued>>();
  /** Attempts a freed deployment slot let go: launched before `waiting`. */
  private readonly unparked = new Queue<Queued>();
  private parkedCount = 0;
  private running = 0;
  private stopped = false;

  constructor(
    private readonly config: Config,
    private readonly registry: DeploymentLookup,
    private readonly endpoints: EndpointClient,
    private readonly logger: Logger,
    private readonly telemetry: Telemetry = standaloneTelemetry(),
    /** Attempts running per deployment: this invoker's own, or every partition thread's. */
    private readonly slots: DeploymentSlots = new LocalSlots(),
  ) {}

  /** Attempts waiting for a slot and attempts running, for the queue-depth gauges. */
  depths(): { waiting: number; running: number } {
    return { waiting: this.waiting.size + this.unparked.size + this.parkedCount, running: this.running };
  }

  start(host: AttemptHost, id: string, epoch: number): void {
    if (this.stopped) return;
    // Every live invocation has at most one attempt waiting, and partitions bound live invocations.
    assert(this.waiting.size < this.config.worker.partitions * MAX_LIVE_INVOCATIONS_PER_PARTITION, () => `${this.waiting.size} attempts wait for a slot: more than there can be live invocations`);
    this.waiting.enqueue({ host, id, epoch });
    this.drain();
  }

  private drain(): void {
    while (this.running < this.config.worker.invoker.concurrent_invocations_limit) {
      const next = this.unparked.dequeue() ?? this.waiting.dequeue();
      if (next === undefined) return;
      const origin = next.parkedOn;
      delete next.parkedOn;
      const r = this.launch(next);
      // A turn a freed slot of `origin` gave is used only by starting there or waiting there again;
      // otherwise (not started, or bound to another deployment now) it passes to the next one parked there.
      if (origin !== undefined && (r.deployment !== origin || r.outcome === 'skipped')) this.unpark(origin);
    }
  }

  private park(deployment: string, q: Queued): void {
    let parked = this.parked.get(deployment);
    if (parked === undefined) this.parked.set(deployment, (parked = new Queue<Queued>()));
    parked.enqueue(q);
    this.parkedCount += 1;
    this.slots.waiting(deployment, 1);
  }

  /** One slot of `deployment` freed (or its limit changed): the next parked attempt goes first. */
  private unpark(deployment: string, all = false): void {
    const parked = this.parked.get(deployment);
    while (parked !== undefined && parked.size > 0) {
      const q = parked.dequeue()!;
      q.parkedOn = deployment;
      this.unparked.enqueue(q);
      this.parkedCount -= 1;
      this.slots.waiting(deployment, -1);
      if (!all) break;
    }
    if (parked !== undefined && parked.size === 0) this.parked.delete(deployment);
  }

  /** Another thread's invoker gave back a slot of `deployment`: the next attempt parked here for it goes. */
  slotFreed(deployment: string): void {
    this.unpark(deployment);
    this.drain();
  }

  /** Deployment limits changed: every parked attempt is looked at again. */
  limitsChanged(): void {
    for (const deployment of [...this.parked.keys()]) this.unpark(deployment, true);
    this.drain();
  }

  forward(id: string, epoch: number, type: number, payload: Uint8Array): void {
    const attempt = this.live.get(id);
    if (attempt !== undefined && attempt.epoch === epoch) attempt.forward(type, payload);
  }

  abort(id: string): void {
    this.live.get(id)?.abort();
  }

  /** The fold refused an entry of the live attempt (RT0017): stop it and record the failure. */
  reject(host: AttemptHost, a: Extract<Action, { kind: 'reject' }>): void {
    this.live.get(a.id)?.abort();
    const s = host.invocation(a.id);
    if (s === undefined) return;
    this.logger.warn({ code: a.error_code, invocation: a.id, entry_index: a.entry_index }, a.message);
    const policy = this.policyFor(s.service, s.handler);
    const decision = decideRetry(policy, failedAttempts(s, a.error_code), Date.now());
    if (decision.then === Then.RETRY) this.telemetry.metrics.target(s.service, s.handler).retries.inc();
    void host
      .append({
        kind: 'attempt_ended',
        attempt_ended: {
          invocation_id: InvocationId.parse(a.id)!.bytes,
          epoch: a.epoch,
          outcome: Outcome.FAILED,
          error_code: a.error_code,
          failure_code: 500,
          failure_message: a.message,
          related_entry_index: a.entry_index,
          related_entry_type: a.entry_type,
          retry_at_ms: decision.retry_at_ms,
          then: decision.then,
        },
      })
      .catch((err) => this.logger.error({ err, invocation: a.id }, 'cannot record the refused entry'));
  }

  private policyFor(serviceName: string, handlerName: string): RetryPolicy {
    const service = this.registry.service(serviceName);
    const handler = service?.handlers.find((h) => h.name === handlerName);
    return retryPolicy(this.config.default_retry_policy, service?.retry_policy, handler?.retry_policy);
  }

  stop(): void {
    this.stopped = true;
    this.waiting.clear();
    this.unparked.clear();
    for (const [deployment, parked] of this.parked) this.slots.waiting(deployment, -parked.size);
    this.parked.clear();
    this.parkedCount = 0;
    for (const a of [...this.live.values()]) a.abort();
  }

  /**
   * Starts an attempt against the deployment its invocation is pinned to (or its service's latest):
   * `started`; `parked` aside when that deployment runs its limit already; `skipped` when the
   * invocation moved on or the deployment is unusable (the failure recorded).
   */
  private launch(q: Queued): { outcome: 'started' | 'parked' | 'skipped'; deployment?: string } {
    const { host, id, epoch } = q;
    const status = host.retired ? undefined : host.invocation(id);
    if (status === undefined || status.status !== 'running' || status.epoch !== epoch) return { outcome: 'skipped' };
    const service = this.registry.service(status.service);
    const deploymentId = status.deployment_id ?? service?.deployment_id;
    const deployment = deploymentId === undefined ? undefined : this.registry.deployment(deploymentId);
    const cells = this.telemetry.metrics.target(status.service, status.handler);
    const failed = attemptFailure(host, id, epoch, this.policyFor(status.service, status.handler), cells);
    const protocol = protocolFor(status, deployment);
    if ('code' in protocol) {
      this.logger.error({ code: protocol.code, invocation: id }, protocol.message);
      this.record(host, id, failed({ error_code: protocol.code, failure_code: 500, message: protocol.message }));
      return { outcome: 'skipped', ...(deploymentId !== undefined ? { deployment: deploymentId } : {}) };
    }
    // The snapshot is taken now: notifications folded before this point are in the journal,
    // later ones are forwarded to the live attempt (begin runs in this same turn).
    const journal = host.journal(id);
    assert(journal.length === status.journal_length, () => `${id}: journal of ${journal.length} entries, status says ${status.journal_length}`);
    const cap = this.registry.deploymentConcurrency?.(protocol.deployment.id);
    if (!this.slots.take(protocol.deployment.id, cap)) {
      this.park(protocol.deployment.id, q);
      // A slot another thread's invoker freed between the take and the park was announced to no one: look again.
      if (!this.slots.full(protocol.deployment.id, cap)) this.unpark(protocol.deployment.id);
      return { outcome: 'parked', deployment: protocol.deployment.id };
    }
    this.running += 1;
    this.begin(q, status, journal, protocol.deployment, protocol.version, failed, cells);
    return { outcome: 'started', deployment: protocol.deployment.id };
  }

  /** The attempt itself, its slot taken: from the journal as folded now, and the object's state unless lazy. */
  private begin(q: Queued, status: InvocationStatus, journal: ReturnType<AttemptHost['journal']>, deployment: LaunchDeployment, protocol_version: number, failed: (f: AttemptFailure) => AttemptEnded, cells: TargetCells): void {
    const { host, id, epoch } = q;
    const service = this.registry.service(status.service);
    const handler = service?.handlers.find((h) => h.name === status.handler);
    // Epoch 0 is the invocation's first attempt (every later one bumps the epoch).
    if (status.epoch === 0) cells.started.inc();
    const started_ms = performance.now();
    // Untraced invocations (tracing off, or accepted before it was on) cost one test here.
    const span = this.telemetry.tracing.enabled ? this.telemetry.tracing.attempt(status, epoch, deployment.id) : undefined;
    const lazy = this.config.worker.invoker.disable_eager_state || (handler?.enable_lazy_state ?? service?.enable_lazy_state ?? false);
    const keyed = status.service_type !== 'Service';
    const entries = keyed && !lazy
      ? [...host.objectState(status.service, status.key, status.scope)].map(([k, v]) => ({ key: Buffer.from(k, 'base64url'), value: v }))
      : [];
    const attempt = new Attempt({
      state: { entries, partial: keyed && lazy },
      resolveCall: (svc, hdl, key, idem, flow) => this.resolveCall(svc, hdl, key, idem, flow),
      status,
      journal,
      deployment,
      protocol_version,
      inactivity_timeout_ms: handler?.inactivity_timeout_ms ?? service?.inactivity_timeout_ms ?? this.config.worker.invoker.inactivity_timeout_ms,
      abort_timeout_ms: handler?.abort_timeout_ms ?? service?.abort_timeout_ms ?? this.config.worker.invoker.abort_timeout_ms,
      message_size_limit_bytes: this.config.worker.invoker.message_size_limit_bytes,
      append: (kind) => host.append(kind, ATTEMPT_MESSAGE),
      endpoints: this.endpoints,
      failed,
      onClose: (outcome, failure) => {
        span?.end(outcome, failure);
        cells.attempts[outcome].inc();
        cells.attemptSeconds.observe((performance.now() - started_ms) / 1000);
        if (this.live.get(id) === attempt) this.live.delete(id);
        this.running -= 1;
        this.slots.give(deployment.id);
        this.unpark(deployment.id);
        this.drain();
      },
      logger: this.logger,
      ...(span ? { traceparent: span.traceparent } : {}),
    });
    this.live.get(id)?.abort();
    this.live.set(id, attempt);
    attempt.start();
  }

  /** Where an attempt's call or send goes, or why it is refused (RT0017, RT0018, RT0020, RT0024). */
  private resolveCall(svc: string, hdl: string, key: string, idem: Parameters<ResolveCall>[3], flow: Parameters<ResolveCall>[4]): ReturnType<ResolveCall> {
    const target = this.registry.handler(svc, hdl);
    if (target === undefined) {
      const message = this.registry.service(svc) === undefined
        ? `call to service '${svc}', which is not registered: register it`
        : `call to handler '${svc}/${hdl}', which does not exist`;
      return { error_code: 'RT0018', message };
    }
    if (target.service.ty !== 'Service' && key === '') {
      return { error_code: 'RT0017', message: `call to ${target.service.ty} '${svc}' without a key` };
    }
    // A call or send is a new request: refused, like at the ingress, when the callee's
    // deployment speaks only deprecated protocol versions.
    const callee = this.registry.deployment(target.service.deployment_id);
    if (callee !== undefined && callee.max_protocol_version < MIN_SERVICE_PROTOCOL_VERSION) {
      return {
        error_code: 'RT0020',
        message: `call to service '${svc}', exposed by deployment ${callee.id} with the deprecated service protocol version ${callee.max_protocol_version}: new requests are not accepted; register a new deployment with an upgraded SDK`,
      };
    }
    const refused = flowRefusal(flow);
    if (refused !== undefined) return { error_code: 'RT0024', message: refused };
    return resolveTarget(this.config, target.service, target.handler, key, idem, flow.scope);
  }

  /** Records the end of an attempt that could not start; a refused append is logged, the invocation stays as it was. */
  private record(host: AttemptHost, id: string, ended: AttemptEnded): void {
    host.append({ kind: 'attempt_ended', attempt_ended: ended }).catch((err) => this.logger.error({ err, invocation: id }, 'cannot record the end of an attempt'));
  }
}

type LaunchDeployment = NonNullable<ReturnType<DeploymentLookup['deployment']>>;
type ResolveCall = ConstructorParameters<typeof Attempt>[0]['resolveCall'];

/** The deployment an attempt runs against and the protocol version it speaks, or why it cannot (RT0011, RT0013, RT0014). */
function protocolFor(status: InvocationStatus, deployment: LaunchDeployment | undefined): { deployment: LaunchDeployment; version: number } | { code: string; message: string } {
  if (deployment === undefined) {
    const message = status.deployment_id
      ? `deployment ${status.deployment_id} that the invocation is pinned to no longer exists`
      : `no deployment found for service ${status.service}`;
    return { code: 'RT0011', message };
  }
  const pinned = status.protocol_version;
  const version = pinned ?? Math.min(deployment.max_protocol_version, MAX_SERVICE_PROTOCOL_VERSION);
  if (version >= Math.max(MIN_SERVICE_PROTOCOL_VERSION, deployment.min_protocol_version) && version <= MAX_SERVICE_PROTOCOL_VERSION) return { deployment, version };
  return pinned !== undefined
    ? { code: 'RT0014', message: `the invocation was started with protocol version ${pinned}, which cannot be resumed here` }
    : { code: 'RT0013', message: `deployment ${deployment.id} supports none of the protocol versions ${MIN_SERVICE_PROTOCOL_VERSION}-${MAX_SERVICE_PROTOCOL_VERSION}` };
}

/** The AttemptEnded of a failed attempt: what the retry policy (or the SDK, or a Retry-After) decides, in one place. */
function attemptFailure(host: AttemptHost, id: string, epoch: number, policy: RetryPolicy, cells: TargetCells): (f: AttemptFailure) => AttemptEnded {
  const invocation_id = InvocationId.parse(id)!.bytes;
  return (f) => {
    const decision = f.behavior === 1 ? { then: Then.PAUSE, retry_at_ms: 0 }
      : f.behavior === 2 ? { then: Then.FAIL, retry_at_ms: 0 }
      : f.retry_after_ms !== undefined ? retryAfter(policy, f.retry_after_ms, Date.now())
      : decideRetry(policy, failedAttempts(host.invocation(id) ?? { retry_count: 0 }, f.error_code), Date.now(), f.next_retry_delay_ms);
    if (decision.then === Then.RETRY) cells.retries.inc();
    const cmd: AttemptEnded = {
      invocation_id,
      epoch,
      outcome: Outcome.FAILED,
      error_code: f.error_code,
      failure_code: f.failure_code,
      failure_message: f.message,
      retry_at_ms: decision.retry_at_ms,
      then: decision.then,
    };
    if (f.retry_after_ms !== undefined) cmd.free_retry = true;
    if (f.related_entry_index !== undefined) cmd.related_entry_index = f.related_entry_index;
    if (f.related_entry_name !== undefined) cmd.related_entry_name = f.related_entry_name;
    if (f.related_entry_type !== undefined) cmd.related_entry_type = f.related_entry_type;
    return cmd;
  };
}

function retryPolicy(base: RetryPolicy, ...overrides: Array<ServiceSchema['retry_policy'] | undefined>): RetryPolicy {
  const p = { ...base };
  for (const o of overrides) {
    if (o === undefined) continue;
    if (o.initial_interval_ms !== undefined) p.initial_interval_ms = o.initial_interval_ms;
    if (o.max_interval_ms !== undefined) p.max_interval_ms = o.max_interval_ms;
    if (o.max_attempts !== undefined) p.max_attempts = o.max_attempts;
    if (o.exponentiation_factor !== undefined) p.exponentiation_factor = o.exponentiation_factor;
    if (o.on_max_attempts !== undefined) p.on_max_attempts = o.on_max_attempts;
  }
  return p;
}

/** Why a call's scope or limit key is refused (RT0024, retried as Restate does), in Restate's words. */
function flowRefusal(flow: { scope?: string; limit_key?: string }): string | undefined {
  if (flow.limit_key !== undefined && flow.scope === undefined) return 'limit key was provided without a scope. Limit keys take effect only when used in combination with scope';
  if (flow.scope === undefined) return undefined;
  const bad = restrictedValueError(flow.scope);
  if (bad !== undefined) return `the provided scope '${flow.scope}' is invalid: ${bad}`;
  if (flow.limit_key === undefined) return undefined;
  const levels = parseLimitKey(flow.limit_key);
  if (!Array.isArray(levels)) return `the provided limit key '${flow.limit_key}' is invalid: ${levels.error}`;
  return undefined;
}
