// Admin API on fastify: Restate 1.7 compatible deployment and service routes, unprefixed and
// under /v2, /v3, /v4. Errors are {"message", "restate_code"} JSON with the right status.

import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { splitAddress, type Config } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import { InvocationId, isDeploymentId } from '../common/ids.js';
import { explain, KeelError } from '../errors/index.js';
import type { Registry, SubscriptionSchema } from '../metadata/registry.js';
import { isSubscriptionId } from '../metadata/subscriptions.js';
import type { RegisterRequest, UpdateRequest } from '../metadata/types.js';
import { emptySource, stateVersion, type IntrospectionSource, type ManageAction } from './introspection.js';
import { QueryEngine, QueryError, toArrow, toJson } from './sql.js';
import { deploymentDetailView, deploymentListView, handlerView, registerView, serviceView } from './views.js';
import { partitionRoutes } from './partitions.js';
import { uiRoutes } from './ui.js';

export const SERVER_VERSION = '1.7.12';
export const MIN_ADMIN_API_VERSION = 2;
export const MAX_ADMIN_API_VERSION = 4;

export interface AdminServerOptions {
  config: Config;
  registry: Registry;
  logger: Logger;
  extraRoutes?: (app: FastifyInstance) => void;
  /** Live invocations, journals, state… for `/query` and the invocation routes. */
  introspection?: IntrospectionSource;
}

const MANAGE_ACTIONS: ManageAction[] = ['cancel', 'kill', 'purge', 'pause', 'resume', 'restart-as-new'];

function checkInvocationId(id: string): void {
  if (!InvocationId.parse(id)) throw new KeelError(undefined, "The request field 'invocation_id' is invalid. Reason: bad format", 400);
}

/** The answer of a manage action, with Restate's messages where the source gave no body. */
function manageReply(reply: FastifyReply, id: string, action: ManageAction, r: { status: number; body?: unknown }): FastifyReply {
  let body = r.body;
  if (r.status >= 400) {
    if (body === undefined || body === null || body === '') {
      const message =
        r.status === 404
          ? `The requested invocation '${id}' does not exist`
          : r.status === 409 && (action === 'kill' || action === 'cancel')
            ? `The invocation '${id}' was already completed.`
            : `Cannot ${action} invocation '${id}'`;
      body = errorBody(message, null);
    } else if (typeof body === 'string') {
      body = errorBody(body, null);
    }
  }
  reply.status(r.status);
  return body === undefined ? reply.send() : reply.send(body);
}

function byteArray(v: unknown): Buffer | undefined {
  if (!Array.isArray(v)) return undefined;
  if (v.some((b) => typeof b !== 'number' || !Number.isInteger(b) || b < 0 || b > 255)) return undefined;
  return Buffer.from(v as number[]);
}

function ingressEndpoint(config: Config): string {
  const { host, port } = splitAddress(config.ingress.bind_address);
  const h = host === '0.0.0.0' || host === '' ? '127.0.0.1' : host === '::' ? '[::1]' : host.includes(':') ? `[${host}]` : host;
  return `http://${h}:${port}/`;
}

function errorBody(message: string, code: string | null): { message: string; restate_code: string | null } {
  return { message, restate_code: code };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function bodyObject(req: FastifyRequest): Record<string, unknown> {
  const b = req.body;
  if (b === undefined || b === null) return {};
  if (!isObject(b)) throw new KeelError(undefined, 'the request body must be a JSON object', 400);
  return b;
}

function optBool(b: Record<string, unknown>, key: string): boolean | undefined {
  const v = b[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw new KeelError(undefined, `the field ${key} must be a boolean`, 400);
  return v;
}

function optStringMap(b: Record<string, unknown>, key: string): Record<string, string> | null | undefined {
  const v = b[key];
  if (v === undefined) return undefined;
  if (v === null) return null;
  if (!isObject(v) || Object.values(v).some((x) => typeof x !== 'string')) {
    throw new KeelError(undefined, `the field ${key} must be an object mapping names to string values`, 400);
  }
  return v as Record<string, string>;
}

function subscriptionView(s: SubscriptionSchema): { id: string; source: string; sink: string; options: Record<string, string> } {
  return { id: s.id, source: s.source, sink: s.sink, options: s.options };
}

/** Clusters come from the config file: created and last modified when this server started. */
const STARTED_AT = new Date().toISOString();

function clusterView(c: { name: string; properties: Record<string, string> }) {
  return { name: c.name, properties: { ...c.properties }, created_at: STARTED_AT, modified_at: STARTED_AT };
}

function checkSubscriptionId(id: string): void {
  if (!isSubscriptionId(id)) {
    throw new KeelError(undefined, `Invalid URL: Cannot parse \`subscription\` with value \`${id}\`: not a subscription id`, 400);
  }
}

function checkDeploymentId(id: string): void {
  if (!isDeploymentId(id)) {
    throw new KeelError(undefined, `Invalid URL: Cannot parse \`deployment\` with value \`${id}\`: not a deployment id`, 400);
  }
}

export async function createAdminServer(opts: AdminServerOptions): Promise<FastifyInstance> {
  const { config, registry, logger } = opts;
  const source = (): IntrospectionSource => opts.introspection ?? emptySource;
  const engine = new QueryEngine(registry, source);
  const app = Fastify({ loggerInstance: logger.child({ component: 'admin' }), logController: new LogController({ disableRequestLogging: true }) }) as unknown as FastifyInstance;

  // Every body is read as JSON whatever its content-type; an empty body is no body.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      done(new KeelError(undefined, `the request body is not valid JSON: ${(err as Error).message}`, 400), undefined);
    }
  });

  app.setErrorHandler((err: unknown, req: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof KeelError) {
      const lvl = err.status >= 500 ? 'error' : 'warn';
      req.log[lvl]({ code: err.code, status: err.status, method: req.method, url: req.url, err: err.message }, 'admin request failed');
      return reply.status(err.status).send(errorBody(err.display, err.code ?? null));
    }
    const e = err as { statusCode?: number; message?: string };
    const status = typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 600 ? e.statusCode : 500;
    if (status >= 500) req.log.error({ err, method: req.method, url: req.url }, 'admin request failed');
    else req.log.warn({ status, method: req.method, url: req.url, err: e.message }, 'admin request rejected');
    return reply.status(status).send(errorBody(e.message ?? 'internal error', null));
  });

  app.setNotFoundHandler((req, reply) => {
    reply.status(404).send(errorBody(`No route for ${req.method} ${req.url.split('?')[0]}`, null));
  });

  app.all('/v1', v1Handler);
  app.all('/v1/*', v1Handler);
  async function v1Handler(_req: FastifyRequest, reply: FastifyReply) {
    return reply
      .status(400)
      .type('text/plain; charset=utf-8')
      .send(`Unsupported Admin API version V1. This server supports versions between V${MIN_ADMIN_API_VERSION} and V${MAX_ADMIN_API_VERSION}.`);
  }

  const routes = async (r: FastifyInstance) => {
    r.get('/version', async () => ({
      version: SERVER_VERSION,
      min_admin_api_version: MIN_ADMIN_API_VERSION,
      max_admin_api_version: MAX_ADMIN_API_VERSION,
      ingress_endpoint: ingressEndpoint(config),
      features: {},
    }));

    r.get('/health', async (_req, reply) => reply.status(200).send());

    r.post('/deployments', async (req, reply) => {
      const b = bodyObject(req);
      let request: RegisterRequest;
      if (b.arn !== undefined && b.arn !== null) {
        if (typeof b.arn !== 'string') throw new KeelError(undefined, 'the field arn must be a string', 400);
        if (b.uri !== undefined && b.uri !== null) throw new KeelError(undefined, 'give either uri or arn, not both', 400);
        request = { arn: b.arn };
        if (b.assume_role_arn !== undefined && b.assume_role_arn !== null) {
          if (typeof b.assume_role_arn !== 'string') throw new KeelError(undefined, 'the field assume_role_arn must be a string', 400);
          request.assume_role_arn = b.assume_role_arn;
        }
      } else {
        if (typeof b.uri !== 'string') throw new KeelError(undefined, 'the field uri (or arn) is required and must be a string', 400);
        request = { uri: b.uri };
      }
      const headers = optStringMap(b, 'additional_headers');
      if (headers !== undefined) request.additional_headers = headers;
      const metadata = optStringMap(b, 'metadata');
      if (metadata !== undefined) request.metadata = metadata;
      for (const k of ['use_http_11', 'force', 'dry_run', 'breaking'] as const) {
        const v = optBool(b, k);
        if (v !== undefined) request[k] = v;
      }
      let result;
      try {
        result = await registry.register(request);
      } catch (err) {
        if (err instanceof KeelError) {
          req.log.warn({ code: err.code, uri: request.uri, arn: request.arn, err: err.message }, 'deployment registration failed');
        }
        throw err;
      }
      const { created, deployment } = result;
      return reply
        .status(created ? 201 : 200)
        .header('location', `deployments/${deployment.id}`)
        .send(registerView(deployment, config));
    });

    r.get('/deployments', async () => ({ deployments: registry.deployments().map(deploymentListView) }));

    r.get<{ Params: { id: string } }>('/deployments/:id', async (req) => {
      const id = req.params.id;
      checkDeploymentId(id);
      const d = registry.deployment(id);
      if (!d) throw new KeelError(undefined, `The requested deployment '${id}' does not exist`, 404);
      return deploymentDetailView(d, config);
    });

    const update = async (req: FastifyRequest<{ Params: { id: string } }>, reply: FastifyReply) => {
      const id = req.params.id;
      checkDeploymentId(id);
      const b = bodyObject(req);
      const request: UpdateRequest = {};
      if (b.uri !== undefined && b.uri !== null) {
        if (typeof b.uri !== 'string') throw new KeelError(undefined, 'the field uri must be a string', 400);
        request.uri = b.uri;
      }
      if (b.arn !== undefined && b.arn !== null) {
        if (typeof b.arn !== 'string') throw new KeelError(undefined, 'the field arn must be a string', 400);
        request.arn = b.arn;
      }
      if (b.assume_role_arn !== undefined) {
        if (b.assume_role_arn !== null && typeof b.assume_role_arn !== 'string') throw new KeelError(undefined, 'the field assume_role_arn must be a string', 400);
        request.assume_role_arn = b.assume_role_arn;
      }
      const headers = optStringMap(b, 'additional_headers');
      if (headers !== undefined) request.additional_headers = headers;
      for (const k of ['use_http_11', 'dry_run', 'overwrite'] as const) {
        const v = optBool(b, k);
        if (v !== undefined) request[k] = v;
      }
      try {
        const d = await registry.updateInPlace(id, request);
        return reply.status(200).send(registerView(d, config));
      } catch (err) {
        if (err instanceof KeelError) req.log.warn({ code: err.code, deployment: id, err: err.message }, 'deployment update failed');
        throw err;
      }
    };
    r.put<{ Params: { id: string } }>('/deployments/:id', update);
    r.patch<{ Params: { id: string } }>('/deployments/:id', update);

    r.delete<{ Params: { id: string }; Querystring: { force?: string } }>('/deployments/:id', async (req, reply) => {
      const id = req.params.id;
      checkDeploymentId(id);
      if (req.query.force !== 'true') return reply.status(501).send();
      if (!registry.deployment(id)) throw new KeelError(undefined, `The requested deployment '${id}' does not exist`, 404);
      await registry.remove(id);
      return reply.status(202).send();
    });

    r.get('/services', async () => ({ services: registry.services().map((s) => serviceView(s, config)) }));

    const serviceOr404 = (name: string) => {
      const s = registry.service(name);
      if (!s) throw new KeelError(undefined, `The requested service '${name}' does not exist`, 404);
      return s;
    };
    r.get<{ Params: { name: string } }>('/services/:name', async (req) => serviceView(serviceOr404(req.params.name), config));
    r.get<{ Params: { name: string } }>('/services/:name/handlers', async (req) => ({
      handlers: serviceOr404(req.params.name).handlers.map(handlerView),
    }));
    r.get<{ Params: { name: string; handler: string } }>('/services/:name/handlers/:handler', async (req) => {
      const s = serviceOr404(req.params.name);
      const h = s.handlers.find((x) => x.name === req.params.handler);
      if (!h) throw new KeelError(undefined, `The requested handler '${req.params.handler}' of service '${s.name}' does not exist`, 404);
      return handlerView(h);
    });

    r.post('/query', async (req, reply) => {
      const b = req.body;
      if (!isObject(b) || typeof b.query !== 'string') {
        const why = isObject(b) && b.query !== undefined ? 'invalid type for field `query`, expected a string' : 'missing field `query`';
        return reply.status(400).send(errorBody(`Failed to deserialize the JSON body into the target type: ${why}`, null));
      }
      const json = String(req.headers.accept ?? '').includes('application/json');
      try {
        const result = await engine.run(b.query);
        // exactly `application/json`: with `; charset=utf-8` the CLI says the server "lacks JSON /query support"
        if (json) return reply.status(200).header('content-type', 'application/json').send(Buffer.from(JSON.stringify(toJson(result))));
        return reply.status(200).type('application/vnd.apache.arrow.stream').send(Buffer.from(toArrow(result)));
      } catch (err) {
        if (err instanceof QueryError) {
          req.log.warn({ status: err.status, err: err.message }, 'query failed');
          return reply.status(err.status).send({ message: err.message });
        }
        req.log.error({ err }, 'query failed');
        return reply.status(500).send({ message: `Internal error: ${(err as Error)?.message ?? String(err)}` });
      }
    });

    r.patch<{ Params: { id: string; action: string } }>('/invocations/:id/:action', async (req, reply) => {
      const { id, action } = req.params;
      if (!MANAGE_ACTIONS.includes(action as ManageAction)) {
        return reply.status(404).send(errorBody(`No route for PATCH ${req.url.split('?')[0]}`, null));
      }
      checkInvocationId(id);
      const r = await source().manage(id, action as ManageAction);
      return manageReply(reply, id, action as ManageAction, r);
    });

    // Deprecated form: DELETE /invocations/{id}?mode=cancel|kill|purge (default cancel), 202.
    r.delete<{ Params: { id: string }; Querystring: { mode?: string } }>('/invocations/:id', async (req, reply) => {
      const { id } = req.params;
      const mode = (req.query.mode ?? 'cancel').toLowerCase();
      if (mode !== 'cancel' && mode !== 'kill' && mode !== 'purge') {
        throw new KeelError(undefined, `Invalid URL: unknown deletion mode '${req.query.mode}', expected cancel, kill or purge`, 400);
      }
      checkInvocationId(id);
      const r = await source().manage(id, mode);
      if (r.status >= 400) return manageReply(reply, id, mode, r);
      return reply.status(202).send();
    });

    r.post<{ Params: { name: string } }>('/services/:name/state', async (req, reply) => {
      const s = serviceOr404(req.params.name);
      if (s.ty === 'Service') throw new KeelError(undefined, 'Cannot modify state for service type Service', 400);
      const b = bodyObject(req);
      if (typeof b.object_key !== 'string') throw new KeelError(undefined, 'Failed to deserialize the JSON body into the target type: missing field `object_key`', 400);
      if (!isObject(b.new_state)) throw new KeelError(undefined, 'Failed to deserialize the JSON body into the target type: missing field `new_state`', 400);
      if (b.version !== undefined && b.version !== null && typeof b.version !== 'string') {
        throw new KeelError(undefined, 'the field version must be a string', 400);
      }
      const entries = new Map<string, Buffer>();
      for (const [k, v] of Object.entries(b.new_state)) {
        const bytes = byteArray(v);
        if (!bytes) throw new KeelError(undefined, `the value of state key '${k}' must be an array of bytes`, 400);
        entries.set(k, bytes);
      }
      const src = source();
      if (!src.setState) throw new KeelError(undefined, 'modifying state is not available on this server', 501);
      const version = typeof b.version === 'string' ? b.version : undefined;
      if (version !== undefined) {
        // As Restate: a stale version is answered 202 and changes nothing.
        const current: Array<[string, Buffer]> = [];
        for await (const e of src.state()) if (e.service === s.name && e.key === b.object_key) current.push([e.state_key, e.value]);
        if (stateVersion(current) !== version) {
          req.log.warn({ service: s.name, key: b.object_key }, 'state update skipped: version does not match the current state');
          return reply.status(202).send();
        }
      }
      await src.setState(s.name, b.object_key, entries, version);
      return reply.status(202).send();
    });

    r.post('/subscriptions', async (req, reply) => {
      const b = bodyObject(req);
      try {
        const sub = await registry.addSubscription({ source: b.source, sink: b.sink, options: b.options });
        return reply.status(201).header('location', `subscriptions/${sub.id}`).send(subscriptionView(sub));
      } catch (err) {
        if (err instanceof KeelError) req.log.warn({ code: err.code, source: b.source, sink: b.sink, err: err.message }, 'subscription refused');
        throw err;
      }
    });

    r.get('/subscriptions', async () => ({ subscriptions: registry.subscriptions().map(subscriptionView) }));

    const subscriptionOr404 = (id: string) => {
      checkSubscriptionId(id);
      const s = registry.subscription(id);
      if (!s) throw new KeelError(undefined, `The requested subscription '${id}' does not exist`, 404);
      return s;
    };
    r.get<{ Params: { id: string } }>('/subscriptions/:id', async (req) => subscriptionView(subscriptionOr404(req.params.id)));
    r.delete<{ Params: { id: string } }>('/subscriptions/:id', async (req, reply) => {
      subscriptionOr404(req.params.id);
      await registry.removeSubscription(req.params.id);
      return reply.status(202).send();
    });

    r.get('/kafka-clusters', async () => ({
      clusters: registry.kafkaClusters().map(clusterView),
    }));
    r.get<{ Params: { name: string } }>('/kafka-clusters/:name', async (req) => {
      const c = registry.kafkaClusters().find((x) => x.name === req.params.name);
      if (!c) throw new KeelError(undefined, `The requested kafka cluster '${req.params.name}' does not exist`, 404);
      return clusterView(c);
    });

    r.get<{ Params: { code: string } }>('/errors/:code', async (req) => {
      const entry = explain(req.params.code);
      if (!entry) throw new KeelError(undefined, `Unknown error code '${req.params.code}'`, 404);
      return entry;
    });
  };

  await app.register(routes);
  for (const v of [2, 3, 4]) await app.register(routes, { prefix: `/v${v}` });
  await app.register(partitionRoutes, { source });
  await app.register(uiRoutes, {});
  if (opts.extraRoutes) opts.extraRoutes(app);
  return app;
}
