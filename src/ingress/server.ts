import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Config } from '../config/index.js';
import { parseDuration_ms } from '../config/units.js';
import { InvocationId, partitionKeyOf, randomPartitionKey } from '../common/ids.js';
import type { Logger } from '../common/logger.js';
import type { Header } from '../log/commands.js';
import type { InvocationStatus } from '../partition/state.js';
import type { Worker } from '../partition/worker.js';

interface HandlerView {
  name: string;
  public: boolean;
  output_content_type?: string;
  output_set_content_type_if_empty: boolean;
}

/** What the ingress needs of the schema registry. */
export interface IngressRegistry {
  service(name: string): { name: string; ty: 'Service' | 'VirtualObject' | 'Workflow'; public: boolean; handlers: HandlerView[] } | undefined;
}

/** Headers that describe the hop, not the request: they do not reach the handler. */
const DROPPED_HEADERS = new Set([
  'connection', 'host', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer',
  'content-length', 'idempotency-key', 'idempotency-expires',
]);

const REQUEST_SIZE_LIMIT_BYTES = 32 * 1024 * 1024;

export async function createIngressServer(opts: {
  config: Config;
  registry: IngressRegistry;
  worker: Worker;
  logger: Logger;
}): Promise<FastifyInstance> {
  const { registry, worker } = opts;
  const app = Fastify({ logger: false, bodyLimit: REQUEST_SIZE_LIMIT_BYTES });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

  app.setErrorHandler((err: any, _req, reply) => {
    const status = typeof err.statusCode === 'number' && err.statusCode >= 400 ? err.statusCode : 500;
    if (status >= 500) opts.logger.error({ err }, 'ingress request failed');
    void reply.code(status).header('x-restate-error-source', 'ingress').send({ code: status, message: err.message });
  });

  app.get('/restate/health', async () => ({}));

  const invoke = async (req: FastifyRequest, reply: FastifyReply) => {
    const url = new URL(req.url, 'http://ingress');
    let segments: string[];
    try {
      segments = url.pathname.split('/').filter((s) => s.length > 0).map(decodeURIComponent);
    } catch {
      return ingressError(reply, 400, 'the request path cannot be decoded');
    }
    if (segments.length < 2) return ingressError(reply, 404, `no route for ${url.pathname}`);
    const service = registry.service(segments[0]!);
    if (service === undefined) return ingressError(reply, 404, `service '${segments[0]}' not found, make sure to register the deployment that exposes it`);
    const keyed = service.ty !== 'Service';
    const handlerAt = keyed ? 2 : 1;
    if (segments.length <= handlerAt) return ingressError(reply, 400, `${service.name} is a ${service.ty}: call /${service.name}/{key}/{handler}`);
    const rest = segments.slice(handlerAt + 1);
    const isSend = rest.length === 1 && rest[0] === 'send';
    if (rest.length > 0 && !isSend) return ingressError(reply, 404, `no route for ${url.pathname}`);
    const handler = service.handlers.find((h) => h.name === segments[handlerAt]);
    if (handler === undefined) return ingressError(reply, 404, `handler '${segments[handlerAt]}' not found in service '${service.name}'`);
    if (!handler.public || !service.public) return ingressError(reply, 400, `the invoked service '${service.name}' is not public`);
    const key = keyed ? segments[1]! : '';

    const delayParam = url.searchParams.get('delay');
    let execute_at_ms = 0;
    if (delayParam !== null) {
      if (!isSend) return ingressError(reply, 400, 'delay is only supported on /send');
      const delay_ms = parseDuration_ms(delayParam);
      if (delay_ms === undefined) return ingressError(reply, 400, `cannot parse delay '${delayParam}'`);
      execute_at_ms = Date.now() + delay_ms;
    }

    const headers: Header[] = [];
    for (const [name, value] of Object.entries(req.headers)) {
      if (DROPPED_HEADERS.has(name) || value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value]) headers.push({ key: name, value: v });
    }
    headers.push({ key: 'x-restate-ingress-path', value: url.pathname + url.search });

    const id = InvocationId.random(keyed ? partitionKeyOf(`${service.name}/${key}`) : randomPartitionKey());
    const body = req.body instanceof Buffer ? req.body : Buffer.alloc(0);
    const idempotency_key = headerValue(req.headers['idempotency-key']);
    const command = {
      invoke: {
        invocation_id: id.bytes,
        service: service.name,
        handler: handler.name,
        key,
        input: body,
        headers,
        service_type: service.ty,
        ...(idempotency_key ? { idempotency_key } : {}),
        ...(execute_at_ms ? { execute_at_ms } : {}),
      },
    };
    void reply.header('x-restate-id', id.text);
    if (isSend) {
      await worker.append(id, command);
      return reply.code(202).send({ invocationId: id.text, status: 'Accepted' });
    }
    // Wait before appending, so a fast completion cannot slip past us.
    const done = worker.awaitCompletion(id);
    await worker.append(id, command);
    return respond(reply, await done, handler);
  };
  app.post('/*', invoke);
  app.get('/*', invoke);
  app.route({ method: ['PUT', 'DELETE', 'PATCH'], url: '/*', handler: async (_req, reply) => ingressError(reply, 405, 'method not allowed: use POST (or GET)') });
  return app;
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function ingressError(reply: FastifyReply, status: number, message: string): FastifyReply {
  return reply.code(status).header('x-restate-error-source', 'ingress').send({ code: status, message });
}

/** Answers with the invocation's output, or its failure with the failure's code as status. */
export function respond(reply: FastifyReply, s: InvocationStatus, handler: HandlerView | undefined): FastifyReply {
  const result = s.result ?? { failure: { code: 500, message: 'the invocation has no result' } };
  if (result.failure !== undefined) {
    const code = result.failure.code;
    const status = code >= 400 && code <= 599 ? code : 500;
    const body: Record<string, unknown> = { code, message: result.failure.message, source: 'invocation' };
    if (result.failure.metadata?.length) body.metadata = Object.fromEntries(result.failure.metadata.map((m) => [m.key, m.value]));
    return reply.code(status).header('x-restate-error-source', 'invocation').send(body);
  }
  const value = Buffer.from(result.value ?? '', 'base64');
  const contentType = handler?.output_content_type ?? 'application/json';
  if (value.length > 0 || handler?.output_set_content_type_if_empty) void reply.header('content-type', contentType);
  return reply.code(200).send(value);
}
