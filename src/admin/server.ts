// Admin API on fastify: Restate 1.7 compatible deployment and service routes, unprefixed and
// under /v2, /v3, /v4. Errors are {"message", "restate_code"} JSON with the right status.

import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { splitAddress, type Config } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import { isDeploymentId } from '../common/ids.js';
import { explain, KeelError } from '../errors/index.js';
import type { Registry } from '../metadata/registry.js';
import type { RegisterRequest, UpdateRequest } from '../metadata/types.js';
import { deploymentDetailView, deploymentListView, handlerView, registerView, serviceView } from './views.js';

export const SERVER_VERSION = '1.7.12';
export const MIN_ADMIN_API_VERSION = 2;
export const MAX_ADMIN_API_VERSION = 4;

export interface AdminServerOptions {
  config: Config;
  registry: Registry;
  logger: Logger;
  extraRoutes?: (app: FastifyInstance) => void;
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

function checkDeploymentId(id: string): void {
  if (!isDeploymentId(id)) {
    throw new KeelError(undefined, `Invalid URL: Cannot parse \`deployment\` with value \`${id}\`: not a deployment id`, 400);
  }
}

export async function createAdminServer(opts: AdminServerOptions): Promise<FastifyInstance> {
  const { config, registry, logger } = opts;
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
      if (typeof b.uri !== 'string') {
        if (typeof b.arn === 'string') throw new KeelError(undefined, 'registering function-platform deployments (arn) is not supported yet', 400);
        throw new KeelError(undefined, 'the field uri is required and must be a string', 400);
      }
      const request: RegisterRequest = { uri: b.uri };
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
          req.log.warn({ code: err.code, uri: request.uri, err: err.message }, 'deployment registration failed');
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
      if (typeof b.arn === 'string') throw new KeelError(undefined, 'function-platform deployments (arn) are not supported yet', 400);
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

    r.get<{ Params: { code: string } }>('/errors/:code', async (req) => {
      const entry = explain(req.params.code);
      if (!entry) throw new KeelError(undefined, `Unknown error code '${req.params.code}'`, 404);
      return entry;
    });
  };

  await app.register(routes);
  for (const v of [2, 3, 4]) await app.register(routes, { prefix: `/v${v}` });
  if (opts.extraRoutes) opts.extraRoutes(app);
  return app;
}
