import type { FastifyInstance } from 'fastify';
import { splitAddress, type Config } from '../../config/index.js';
import { explain, KeelError, keelError } from '../../errors/index.js';
import type { AdminContext } from '../context.js';
import { errorBody } from '../errors.js';

export const SERVER_VERSION = '1.7.12';
export const MIN_ADMIN_API_VERSION = 2;
export const MAX_ADMIN_API_VERSION = 4;

function ingressEndpoint(config: Config): string {
  const { host, port } = splitAddress(config.ingress.bind_address);
  const h = host === '0.0.0.0' || host === '' ? '127.0.0.1' : host === '::' ? '[::1]' : host.includes(':') ? `[${host}]` : host;
  return `http://${h}:${port}/`;
}

/** `/version`, `/health` (503 naming stopped partitions) and `/errors/{code}`. */
export function metaRoutes(ctx: AdminContext) {
  return async (r: FastifyInstance) => {
    r.get('/version', async () => ({
      version: SERVER_VERSION,
      min_admin_api_version: MIN_ADMIN_API_VERSION,
      max_admin_api_version: MAX_ADMIN_API_VERSION,
      ingress_endpoint: ingressEndpoint(ctx.config),
      // Flow control (scopes, limit keys, the rule book) is always on in Keel.
      features: { vqueues: true },
    }));

    r.get('/health', async (_req, reply) => {
      const failures = ctx.failures();
      if (failures.length === 0) return reply.status(200).send();
      const list = failures.map((f) => `partition ${f.partition}: ${f.reason}`).join('; ');
      const err = new KeelError('KEEL0503', `${failures.length} partition(s) stopped: ${list}`);
      return reply.status(err.status).send({ ...errorBody(err.display, err.code), partitions: failures });
    });

    r.get<{ Params: { code: string } }>('/errors/:code', { schema: { params: { type: 'object', properties: { code: { type: 'string', maxLength: 32 } } } } }, async (req) => {
      const entry = explain(req.params.code);
      if (!entry) throw keelError('KEEL0004', { what: 'error code', name: req.params.code });
      return entry;
    });
  };
}
