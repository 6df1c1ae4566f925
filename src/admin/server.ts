// Admin API on fastify: Restate 1.7 compatible routes, unprefixed and under /v2, /v3, /v4, one
// plugin per resource. Errors are {"message", "restate_code"} JSON with a stable code.

import type { EndpointClient } from '../endpoint/client.js';
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { RuleBook } from '../common/limit-rules.js';
import type { Config } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import { KeelError } from '../errors/index.js';
import type { Registry } from '../metadata/registry.js';
import type { KeelMetrics } from '../telemetry/metrics.js';
import type { AdminContext } from './context.js';
import { bearerAuth } from '../ingress/auth.js';
import { edgeServerOptions, hardenServer, type EdgeErrors, type PartitionRouting } from '../ingress/edge.js';
import { errorBody, installErrorHandling } from './errors.js';
import { emptySource, type IntrospectionSource } from './introspection.js';
import { deploymentRoutes } from './routes/deployments.js';
import { invocationRoutes } from './routes/invocations.js';
import { limitRuleRoutes } from './routes/limits.js';
import { scheduleRoutes } from './routes/schedules.js';
import { MAX_ADMIN_API_VERSION, metaRoutes, MIN_ADMIN_API_VERSION } from './routes/meta.js';
import { queryRoutes } from './routes/query.js';
import { serviceRoutes } from './routes/services.js';
import { subscriptionRoutes } from './routes/subscriptions.js';
import { metricsRoutes } from './metrics.js';
import { partitionRoutes } from './partitions.js';
import { QueryEngine } from './query/engine.js';
import { uiRoutes } from './ui.js';
import { compileSchemasLazily } from '../ingress/validation.js';

export { MAX_ADMIN_API_VERSION, MIN_ADMIN_API_VERSION, SERVER_VERSION } from './routes/meta.js';

export interface AdminServerOptions {
  config: Config;
  registry: Registry;
  logger: Logger;
  extraRoutes?: (app: FastifyInstance) => void;
  /** Live invocations, journals, state… for `/query` and the invocation routes. */
  introspection?: IntrospectionSource;
  /** Partitions that stopped, for `/health`. */
  failures?: () => Array<{ partition: number; reason: string }>;
  /** The query engine for `/query`; without one the admin server makes its own (started on the first query). */
  engine?: QueryEngine;
  /** Served at `GET /metrics` when given. */
  metrics?: KeelMetrics;
  /** The invoker's endpoint client (its request identity): the replay check talks to endpoints through it. */
  endpoints?: EndpointClient;
  /**
   * Hands a changed rule book to the partitions (the worker's setLimitRules); the rule routes
   * answer once it resolves. Without one (an admin server with no partitions) the book is only stored.
   */
  applyLimitRules?: (book: RuleBook) => Promise<void>;
  /** In a cluster with the partitions spread: where requests for partitions led elsewhere go. */
  routing?: PartitionRouting;
}

/** The query engine of a server: `/query` and the PostgreSQL wire protocol share it. */
export function createQueryEngine(config: Config, registry: Registry, source: () => IntrospectionSource, logger: Logger): QueryEngine {
  return new QueryEngine(config.admin.query_engine, config.base_dir, registry, source, logger.child({ component: 'query-engine' }));
}

/** Every body is read as JSON whatever its content-type (as Restate does); an empty body is no body. */
function parseAnyAsJson(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    const text = String(body);
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      done(new KeelError('KEEL0001', `the request body is not valid JSON: ${(err as Error).message}`), undefined);
    }
  });
}

/** `/v2/x`, `/v3/x` and `/v4/x` are `/x`; `/v1/...` stays, to be refused. */
function stripVersion(url: string): string {
  const m = /^\/v([2-4])(\/|\?|$)/.exec(url);
  if (m === null) return url;
  const rest = url.slice(3);
  return rest.startsWith('/') ? rest : `/${rest}`;
}

const ADMIN_ERRORS: EdgeErrors = { body: (code, message) => errorBody(message, code), badRequest: 'KEEL0002' };

/** Health checks stay open whatever the tokens, and so does the UI's static app (its data comes from the API). */
const OPEN_PATH = /^(?:\/v\d+)?\/health$|^\/$|^\/ui(?:\/.*)?$/;

export async function createAdminServer(opts: AdminServerOptions): Promise<FastifyInstance> {
  const source = (): IntrospectionSource => opts.introspection ?? emptySource;
  const engine = opts.engine ?? createQueryEngine(opts.config, opts.registry, source, opts.logger);
  const ctx: AdminContext = {
    config: opts.config,
    registry: opts.registry,
    logger: opts.logger,
    source,
    engine,
    failures: opts.failures ?? (() => []),
    applyLimitRules: opts.applyLimitRules ?? (async () => {}),
    ...(opts.endpoints !== undefined ? { endpoints: opts.endpoints } : {}),
  };
  const logger = opts.logger.child({ component: 'admin' });
  const edge = { limits: opts.config.http, errors: ADMIN_ERRORS, logger };
  const app = Fastify({
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
    // /v2, /v3 and /v4 serve the same routes: one set of routes (and of compiled schemas, a
    // quarter of the startup time when each prefix had its own) behind a rewrite.
    rewriteUrl: (req) => stripVersion(req.url ?? '/'),
    ...edgeServerOptions(edge),
  }) as unknown as FastifyInstance;
  compileSchemasLazily(app);
  // Before any route: every route, /metrics and later ones included, is behind the checks.
  hardenServer(app, edge);
  bearerAuth(app, { tokens: opts.config.admin.auth_tokens, cluster: opts.config.cluster?.auth_tokens ?? [], realm: 'keel-admin', open: (path) => OPEN_PATH.test(path), errors: ADMIN_ERRORS, logger });
  parseAnyAsJson(app);
  installErrorHandling(app, opts.routing);
  if (opts.engine === undefined) app.addHook('onClose', async () => engine.close());

  // Restate's words, in the error shape every other refusal has (Restate sends them as plain text).
  const v1 = async (_req: FastifyRequest, reply: FastifyReply) => {
    const err = new KeelError('KEEL0006', `Unsupported Admin API version V1. This server supports versions between V${MIN_ADMIN_API_VERSION} and V${MAX_ADMIN_API_VERSION}.`);
    return reply.status(err.status).send(errorBody(err.message, err.code));
  };
  app.all('/v1', v1);
  app.all('/v1/*', v1);

  const routes = async (r: FastifyInstance) => {
    await r.register(metaRoutes(ctx));
    await r.register(deploymentRoutes(ctx));
    await r.register(serviceRoutes(ctx));
    await r.register(invocationRoutes(ctx));
    await r.register(queryRoutes(ctx));
    await r.register(subscriptionRoutes(ctx));
    await r.register(limitRuleRoutes(ctx));
    await r.register(scheduleRoutes(ctx));
  };
  await app.register(routes);
  await app.register(partitionRoutes, { source });
  if (opts.metrics) await app.register(metricsRoutes, { metrics: opts.metrics });
  await app.register(uiRoutes, {});
  if (opts.extraRoutes) opts.extraRoutes(app);
  return app;
}

export { errorBody };
