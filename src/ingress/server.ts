import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Config } from '../config/index.js';
import { KeelError } from '../errors/index.js';
import type { Logger } from '../common/logger.js';
import { NotLedHereError, PartitionMovedError } from '../partition/errors.js';
import type { PartitionGateway } from '../partition/gateway.js';
import type { Telemetry } from '../telemetry/index.js';
import { bearerAuth } from './auth.js';
import { discardOversizedBody, edgeServerOptions, hardenServer, schemaError, type EdgeErrors, type PartitionRouting } from './edge.js';
import { invoke, type IngressRegistry } from './invoke.js';
import { pathSegments } from './paths.js';
import { compileSchemasLazily } from './validation.js';
import { ingressError } from './respond.js';
import { restateRoutes } from './restate-routes.js';

export type { IngressRegistry } from './invoke.js';

/** Errors the edge raises before a route runs, shaped as the ingress shapes its own. */
const INGRESS_ERRORS: EdgeErrors = {
  body: (code, message, status) => ({ code: status, message, restate_code: code }),
  headers: { 'x-restate-error-source': 'ingress' },
  badRequest: 'KEEL0012',
};

/** Fastify's own 4xx, as the stable codes of the ingress. */
const FASTIFY_CODES: Record<number, 'KEEL0413' | 'KEEL0414' | 'KEEL0431'> = { 413: 'KEEL0413', 414: 'KEEL0414', 431: 'KEEL0431' };

/** The ingress on port 8080: calls, sends, attach/output, awakeables, as Restate 1.7 serves them. */
export async function createIngressServer(opts: { config: Config; registry: IngressRegistry; partitions: PartitionGateway; logger: Logger; telemetry: Telemetry; routing?: PartitionRouting }): Promise<FastifyInstance> {
  const deps = { config: opts.config, registry: opts.registry, partitions: opts.partitions, logger: opts.logger.child({ component: 'ingress' }), telemetry: opts.telemetry };
  const edge = { limits: opts.config.http, errors: INGRESS_ERRORS, logger: deps.logger };
  const app = Fastify({
    logger: false,
    bodyLimit: opts.config.ingress.request_size_limit_bytes,
    ...edgeServerOptions(edge),
  });
  compileSchemasLazily(app);
  hardenServer(app, edge);
  bearerAuth(app, { tokens: opts.config.ingress.auth_tokens, cluster: opts.config.cluster?.auth_tokens ?? [], realm: 'keel-ingress', open: (path) => path === '/restate/health', errors: INGRESS_ERRORS, logger: deps.logger });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  app.setErrorHandler((raw: unknown, req, reply) => {
    const err = (raw as FastifyError).validation ? schemaError(raw as FastifyError) : raw;
    if (err instanceof NotLedHereError && opts.routing?.elsewhere !== undefined) return opts.routing.elsewhere(err.partition, req, reply);
    if (err instanceof PartitionMovedError && opts.routing?.attach !== undefined) return opts.routing.attach(err.partition, err.invocation, req, reply);
    if (err instanceof KeelError) {
      // Back-pressure (KEEL0501) and a stopped partition (KEEL0503) are the server's answers, not faults.
      deps.logger[err.status >= 500 && err.code !== 'KEEL0501' ? 'error' : 'warn']({ code: err.code, url: req.url, err: err.message }, 'ingress request refused');
      return void ingressError(reply, err.code, err.message, err.status);
    }
    const e = err as { statusCode?: number; message?: string };
    const status = typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 600 ? e.statusCode : 500;
    if (status >= 500) deps.logger.error({ err, code: 'RT0006', url: req.url }, 'ingress request failed');
    else deps.logger.warn({ status, url: req.url, err: e.message }, 'ingress request rejected');
    const code = status >= 500 ? 'RT0006' : (FASTIFY_CODES[status] ?? 'KEEL0012');
    if (code === 'KEEL0413') discardOversizedBody(req, reply);
    const message = code === 'KEEL0413' ? `the request body is larger than ingress.request_size_limit (${opts.config.ingress.request_size_limit_bytes} bytes)` : (e.message ?? 'internal error');
    void ingressError(reply, code, message, status);
  });
  app.setNotFoundHandler((req, reply) => void ingressError(reply, 'KEEL0011', `no route for ${req.method} ${req.url}`));

  await restateRoutes(app, deps);
  const call = async (req: FastifyRequest, reply: FastifyReply) => invoke(deps, req, reply, pathSegments(req.url));
  app.post('/*', call);
  app.get('/*', call);
  app.route({ method: ['PUT', 'DELETE', 'PATCH'], url: '/*', handler: async (_req, reply) => ingressError(reply, 'KEEL0005', 'method not allowed: use POST (or GET)') });
  return app;
}
