import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Config } from '../config/index.js';
import { KeelError } from '../errors/index.js';
import type { Logger } from '../common/logger.js';
import type { Worker } from '../partition/worker.js';
import type { Telemetry } from '../telemetry/index.js';
import { invoke, type IngressRegistry } from './invoke.js';
import { ingressError } from './respond.js';
import { restateRoutes } from './restate-routes.js';

export type { IngressRegistry } from './invoke.js';

const REQUEST_SIZE_LIMIT_BYTES = 32 * 1024 * 1024;

/** The ingress on port 8080: calls, sends, attach/output, awakeables, as Restate 1.7 serves them. */
export async function createIngressServer(opts: { config: Config; registry: IngressRegistry; worker: Worker; logger: Logger; telemetry: Telemetry }): Promise<FastifyInstance> {
  const deps = { config: opts.config, registry: opts.registry, worker: opts.worker, logger: opts.logger.child({ component: 'ingress' }), telemetry: opts.telemetry };
  const app = Fastify({ logger: false, bodyLimit: REQUEST_SIZE_LIMIT_BYTES });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  app.setErrorHandler((err: unknown, req, reply) => {
    if (err instanceof KeelError) {
      // Back-pressure (KEEL0501) and a stopped partition (KEEL0503) are the server's answers, not faults.
      deps.logger[err.status >= 500 && err.code !== 'KEEL0501' ? 'error' : 'warn']({ code: err.code, url: req.url, err: err.message }, 'ingress request refused');
      return void ingressError(reply, err.code, err.message, err.status);
    }
    const e = err as { statusCode?: number; message?: string };
    const status = typeof e.statusCode === 'number' && e.statusCode >= 400 ? e.statusCode : 500;
    if (status >= 500) deps.logger.error({ err, code: 'RT0006' }, 'ingress request failed');
    else deps.logger.warn({ status, url: req.url, err: e.message }, 'ingress request rejected');
    void ingressError(reply, status >= 500 ? 'RT0006' : 'KEEL0012', e.message ?? 'internal error', status);
  });
  app.setNotFoundHandler((req, reply) => void ingressError(reply, 'KEEL0011', `no route for ${req.method} ${req.url}`));

  restateRoutes(app, deps);
  const call = (req: FastifyRequest, reply: FastifyReply) => {
    let segments: string[];
    try {
      segments = new URL(req.url, 'http://ingress').pathname.split('/').filter((s) => s.length > 0).map(decodeURIComponent);
    } catch {
      return ingressError(reply, 'KEEL0012', 'the request path cannot be decoded');
    }
    return invoke(deps, req, reply, segments);
  };
  app.post('/*', call);
  app.get('/*', call);
  app.route({ method: ['PUT', 'DELETE', 'PATCH'], url: '/*', handler: async (_req, reply) => ingressError(reply, 'KEEL0005', 'method not allowed: use POST (or GET)') });
  return app;
}
