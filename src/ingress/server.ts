import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Config } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import type { Worker } from '../partition/worker.js';
import { invoke, type IngressRegistry } from './invoke.js';
import { ingressError } from './respond.js';
import { restateRoutes } from './restate-routes.js';

export type { IngressRegistry } from './invoke.js';

const REQUEST_SIZE_LIMIT_BYTES = 32 * 1024 * 1024;

/** The ingress on port 8080: calls, sends, attach/output, awakeables, as Restate 1.7 serves them. */
export async function createIngressServer(opts: { config: Config; registry: IngressRegistry; worker: Worker; logger: Logger }): Promise<FastifyInstance> {
  const deps = { config: opts.config, registry: opts.registry, worker: opts.worker, logger: opts.logger.child({ component: 'ingress' }) };
  const app = Fastify({ logger: false, bodyLimit: REQUEST_SIZE_LIMIT_BYTES });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  app.setErrorHandler((err: any, _req, reply) => {
    const status = typeof err.statusCode === 'number' && err.statusCode >= 400 ? err.statusCode : 500;
    if (status >= 500) opts.logger.error({ err }, 'ingress request failed');
    void ingressError(reply, status, err.message);
  });
  app.setNotFoundHandler((req, reply) => void ingressError(reply, 404, `no route for ${req.method} ${req.url}`));

  restateRoutes(app, deps);
  const call = (req: FastifyRequest, reply: FastifyReply) => {
    let segments: string[];
    try {
      segments = new URL(req.url, 'http://ingress').pathname.split('/').filter((s) => s.length > 0).map(decodeURIComponent);
    } catch {
      return ingressError(reply, 400, 'the request path cannot be decoded');
    }
    return invoke(deps, req, reply, segments);
  };
  app.post('/*', call);
  app.get('/*', call);
  app.route({ method: ['PUT', 'DELETE', 'PATCH'], url: '/*', handler: async (_req, reply) => ingressError(reply, 405, 'method not allowed: use POST (or GET)') });
  return app;
}
