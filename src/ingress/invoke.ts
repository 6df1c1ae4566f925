import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import { MIN_SERVICE_PROTOCOL_VERSION as MIN_PROTOCOL_VERSION } from '../protocol/versions.js';
import { parseDuration_ms } from '../common/units.js';
import type { Header } from '../log/commands.js';
import { resolveTarget } from '../metadata/targets.js';
import type { HandlerSchema, ServiceSchema } from '../metadata/types.js';
import type { InvokeOutcome, PartitionGateway } from '../partition/gateway.js';
import type { InvocationStatus } from '../partition/state.js';
import type { IngressSpan, Telemetry } from '../telemetry/index.js';
import { MAX_DELAY_MS, MAX_DELAY_TEXT_CHARS, MAX_IDEMPOTENCY_KEY_CHARS, MAX_KEY_CHARS } from './limits.js';
import { flowOf } from './flow.js';
import { ingressError, respond } from './respond.js';
import type { ErrorCode } from '../errors/index.js';
import { NODE_HEADER_NAMES } from './auth.js';

/** What the ingress needs of the schema registry. */
export interface IngressRegistry {
  service(name: string): ServiceSchema | undefined;
  /** The deployment a service's latest revision lives on (its protocol range decides RT0020). */
  deployment(id: string): { id: string; max_protocol_version: number } | undefined;
  /** In a cluster: takes in what other nodes registered up to now. */
  catchUp?(): Promise<void>;
}

/** Headers that describe the hop, not the request (between clients and nodes, or nodes of a cluster): they do not reach the handler. */
const DROPPED_HEADERS = new Set([
  'connection', 'host', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer',
  'content-length', 'idempotency-key', 'idempotency-expires',
  ...NODE_HEADER_NAMES,
]);

export interface InvokeDeps {
  config: Config;
  registry: IngressRegistry;
  partitions: PartitionGateway;
  logger: Logger;
  telemetry: Telemetry;
}

/** Counts the request in `keel_ingress_requests_in_flight` while `f` runs. */
export async function inFlight<T>(deps: Pick<InvokeDeps, 'telemetry'>, f: () => Promise<T>): Promise<T> {
  const gauge = deps.telemetry.metrics.ingressInFlight;
  gauge.inc();
  try {
    return await f();
  } finally {
    gauge.inc(-1);
  }
}

/**
 * `POST /{service}/[{key}/]{handler}[/send]`: resolves the target, appends the Invoke and
 * answers with the result (call) or 202 once the invocation is durable (send).
 * `segments` is the decoded path after any `/restate/call|send` prefix; `forceSend` is set
 * by `/restate/send/...`.
 */
export function invoke(deps: InvokeDeps, req: FastifyRequest, reply: FastifyReply, segments: string[], forceSend?: boolean, scope?: string): Promise<FastifyReply> {
  const tracing = deps.telemetry.tracing;
  if (!tracing.enabled) return inFlight(deps, () => invokeTarget(deps, req, reply, segments, { forceSend, scope }, undefined));
  const span = tracing.ingress(req.headers);
  // The status is read from `reply`: what the handler resolves with is not always the reply.
  return inFlight(deps, () => invokeTarget(deps, req, reply, segments, { forceSend, scope }, span)).then(
    (r) => {
      span?.end(reply.statusCode);
      return r;
    },
    (err: unknown) => {
      span?.end((err as { status?: number }).status ?? 500);
      throw err;
    },
  );
}

/** How the path asked: `/send` forced (or not), and in which scope. */
interface Route {
  forceSend: boolean | undefined;
  scope: string | undefined;
}

/** Why the ingress refuses a request before it reaches a partition. */
interface Refusal {
  refused: ErrorCode;
  message: string;
}

/** The handler a path names, or why there is none to call (the registry caught up once when it does not know the name). */
async function findHandler(deps: InvokeDeps, url: string, segments: string[], forceSend: boolean | undefined): Promise<{ service: ServiceSchema; handler: HandlerSchema; key: string; isSend: boolean } | Refusal> {
  const { registry } = deps;
  const noRoute: Refusal = { refused: 'KEEL0011', message: `no route for ${url}` };
  if (segments.length < 2) return noRoute;
  let service = registry.service(segments[0]!);
  // Unknown here: it may have been registered through another node of a cluster a moment ago
  // (read once per request at most).
  let caughtUp = registry.catchUp === undefined;
  if (service === undefined && !caughtUp) {
    caughtUp = true;
    service = await registry.catchUp!().then(() => registry.service(segments[0]!));
  }
  if (service === undefined) return { refused: 'KEEL0011', message: `service '${segments[0]}' not found, make sure to register the deployment that exposes it` };
  // RT0020: the latest deployment only speaks deprecated protocol versions (metadata stored by an
  // older server). New requests are refused; invocations already in flight fail with RT0013.
  const deployment = registry.deployment(service.deployment_id);
  if (deployment !== undefined && deployment.max_protocol_version < MIN_PROTOCOL_VERSION) {
    const message = `[RT0020] service '${service.name}' is exposed by deployment ${deployment.id}, which uses the deprecated service protocol version ${deployment.max_protocol_version} (this server speaks ${MIN_PROTOCOL_VERSION} and above): new requests are not accepted; register a new deployment with an upgraded SDK`;
    deps.logger.warn({ code: 'RT0020', service: service.name, deployment: deployment.id }, message);
    return { refused: 'RT0020', message };
  }
  const keyed = service.ty !== 'Service';
  const handlerAt = keyed ? 2 : 1;
  if (segments.length <= handlerAt) return { refused: 'KEEL0012', message: `${service.name} is a ${service.ty}: call /${service.name}/{key}/{handler}` };
  const rest = segments.slice(handlerAt + 1);
  const isSend = forceSend ?? (rest.length === 1 && rest[0] === 'send');
  if (rest.length > (forceSend === undefined && isSend ? 1 : 0)) return noRoute;
  let handler = service.handlers.find((h) => h.name === segments[handlerAt]);
  if (handler === undefined && !caughtUp) {
    await registry.catchUp!();
    service = registry.service(service.name) ?? service;
    handler = service.handlers.find((h) => h.name === segments[handlerAt]);
  }
  if (handler === undefined) return { refused: 'KEEL0011', message: `handler '${segments[handlerAt]}' not found in service '${service.name}'` };
  if (!handler.public || !service.public) return { refused: 'KEEL0012', message: `the invoked service '${service.name}' is not public` };
  return { service, handler, key: keyed ? segments[1]! : '', isSend };
}

async function invokeTarget(deps: InvokeDeps, req: FastifyRequest, reply: FastifyReply, segments: string[], route: Route, span: IngressSpan | undefined): Promise<FastifyReply> {
  const { partitions } = deps;
  const found = await findHandler(deps, req.url, segments, route.forceSend);
  if ('refused' in found) return ingressError(reply, found.refused, found.message);
  const { service, handler, key, isSend } = found;
  if (key.length > MAX_KEY_CHARS) return ingressError(reply, 'KEEL0012', `the key is ${key.length} characters long, more than ${MAX_KEY_CHARS}`);
  const url = new URL(req.url, 'http://ingress');
  const flow = flowOf(route.scope, req.headers, url.searchParams);
  if ('error' in flow) return refuseFlow(deps, req, reply, flow.error);

  const delay = delayOf(url.searchParams.get('delay'), isSend);
  if (typeof delay === 'string') return ingressError(reply, 'KEEL0012', delay);
  const execute_at_ms = delay === 0 ? 0 : Date.now() + delay;
  const idempotencyKey = headerValue(req.headers['idempotency-key']);
  if (idempotencyKey === '') return ingressError(reply, 'KEEL0012', 'the idempotency-key header must not be empty');
  if (idempotencyKey !== undefined && idempotencyKey.length > MAX_IDEMPOTENCY_KEY_CHARS) {
    return ingressError(reply, 'KEEL0012', `the idempotency-key header is ${idempotencyKey.length} characters long, more than ${MAX_IDEMPOTENCY_KEY_CHARS}`);
  }
  const target = resolveTarget(deps.config, service, handler, key, idempotencyKey, flow.scope, () => partitions.anyKey());
  if (target.workflow_run && idempotencyKey) return ingressError(reply, 'KEEL0012', 'the idempotency key is not supported for workflow run handlers');

  void reply.header('x-restate-id', target.id.text);
  span?.target(service.name, handler.name, target.id.text);
  const headers = handlerHeaders(req, url);
  const body = req.body instanceof Buffer ? req.body : Buffer.alloc(0);
  const outcome = await partitions.invoke({
    id: target.id,
    deterministic: target.deterministic,
    send: isSend,
    workflow_run: target.workflow_run,
    ...(flow.scope !== undefined ? { flow: { scope: flow.scope, limit_key: flow.limit_key } } : {}),
    invoke: {
      invocation_id: target.id.bytes,
      service: service.name,
      handler: handler.name,
      key,
      input: body,
      headers,
      service_type: target.service_type,
      handler_type: target.handler_type,
      completion_retention_ms: target.completion_retention_ms,
      journal_retention_ms: target.journal_retention_ms,
      ...(idempotencyKey ? { idempotency_key: idempotencyKey } : {}),
      ...(flow.scope !== undefined ? { scope: flow.scope } : {}),
      ...(flow.limit_key !== undefined ? { limit_key: flow.limit_key } : {}),
      ...(flow.priority !== undefined ? { priority: flow.priority } : {}),
      ...(execute_at_ms ? { execute_at_ms } : {}),
      ...(span ? { traceparent: span.traceparent } : {}),
    },
  });
  return answer(deps, reply, outcome, { id: target.id.text, handler, execute_at_ms, flow });
}

/** The request's headers as the handler gets them, and the path it was called by. */
function handlerHeaders(req: FastifyRequest, url: URL): Header[] {
  const headers: Header[] = [];
  for (const [name, value] of Object.entries(req.headers)) {
    // HTTP/2's pseudo-header fields (:path, :authority…) are the request line, not headers.
    if (DROPPED_HEADERS.has(name) || value === undefined || name.startsWith(':')) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.push({ key: name, value: v });
  }
  headers.push({ key: 'x-restate-ingress-path', value: url.pathname + url.search });
  return headers;
}

/** The HTTP answer to what became of an Invoke. */
function answer(deps: InvokeDeps, reply: FastifyReply, outcome: InvokeOutcome, asked: { id: string; handler: HandlerSchema; execute_at_ms: number; flow: { scope?: string; limit_key?: string } }): FastifyReply {
  switch (outcome.kind) {
    case 'completed':
      return respondCompleted(reply, outcome.status, asked.handler);
    case 'accepted': {
      // A time past what a Date holds (a huge ?delay=) has no RFC 3339 form: it is left out.
      const at = asked.execute_at_ms;
      const executionTime = at && Math.abs(at) <= 8.64e15 ? new Date(at).toISOString() : undefined;
      return reply.code(202).send({ invocationId: asked.id, status: 'Accepted', ...(executionTime ? { executionTime } : {}) });
    }
    case 'previously_accepted':
      return reply.code(202).send({ invocationId: asked.id, status: 'PreviouslyAccepted' });
    case 'workflow_exists':
      return ingressError(reply, 'KEEL0008', 'the workflow method was already invoked', undefined, 'invocation');
    case 'backlog_full': {
      const { full } = outcome;
      deps.logger.info({ code: 'KEEL0902', scope: asked.flow.scope, limit_key: asked.flow.limit_key, rule: full.pattern, waiting: full.waiting }, 'ingress request refused: flow-control backlog full');
      deps.telemetry.metrics.flowRejected(full.pattern);
      void reply.removeHeader('x-restate-id').header('retry-after', String(full.retry_after_s));
      return ingressError(reply, 'KEEL0902', `the backlog of rule '${full.pattern}' is full: ${full.waiting} invocations wait (limits.backlog ${full.backlog}); retry after ${full.retry_after_s} s`);
    }
  }
}

/** A scope or limit key refused (400 KEEL0901), logged: a client sending them wrong is worth a warning. */
export function refuseFlow(deps: Pick<InvokeDeps, 'logger'>, req: FastifyRequest, reply: FastifyReply, message: string): FastifyReply {
  deps.logger.warn({ code: 'KEEL0901', url: req.url.slice(0, 200), err: message }, 'ingress request refused');
  return ingressError(reply, 'KEEL0901', message);
}

export function respondCompleted(reply: FastifyReply, s: InvocationStatus, handler: HandlerSchema | undefined): FastifyReply {
  if (s.idempotency_key && s.completed_at_ms !== undefined) {
    void reply.header('idempotency-expires', new Date(s.completed_at_ms + s.completion_retention_ms).toISOString());
  }
  return respond(reply, s, handler);
}

/** The delay of `?delay=` in ms (0 without one), or why it is refused. */
function delayOf(text: string | null, isSend: boolean): number | string {
  if (text === null) return 0;
  if (!isSend) return 'the query parameter delay is only supported on /send';
  const delay_ms = text.length <= MAX_DELAY_TEXT_CHARS ? parseDuration_ms(text) : undefined;
  const shown = text.length > MAX_DELAY_TEXT_CHARS ? `${text.slice(0, MAX_DELAY_TEXT_CHARS)}…` : text;
  if (delay_ms === undefined || !Number.isFinite(delay_ms)) return `the query parameter delay cannot be parsed: '${shown}': use ISO 8601 (PT10S) or 10s`;
  if (delay_ms > MAX_DELAY_MS) return `the query parameter delay '${shown}' is longer than the maximum of 10 years`;
  return delay_ms;
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}
