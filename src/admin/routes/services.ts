import type { FastifyInstance } from 'fastify';
import { KeelError, keelError } from '../../errors/index.js';
import type { ServiceChange, ServiceSchema } from '../../metadata/types.js';
import { parseDuration_ms } from '../../common/units.js';
import type { AdminContext } from '../context.js';
import { stateVersion } from '../introspection.js';
import { handlerView, serviceView } from '../views.js';

interface StateBody {
  object_key: string;
  new_state: Record<string, number[]>;
  version?: string | null;
}

const stateBody = {
  type: 'object',
  required: ['object_key', 'new_state'],
  properties: {
    object_key: { type: 'string', maxLength: 4096 },
    new_state: { type: 'object', additionalProperties: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 255 } } },
    version: { type: ['string', 'null'] },
  },
} as const;

const name = { type: 'string', minLength: 1, maxLength: 1024 } as const;
const serviceParams = { type: 'object', properties: { name }, required: ['name'] } as const;
const handlerParams = { type: 'object', properties: { name, handler: name }, required: ['name', 'handler'] } as const;

/** `/services`: list, describe, handlers, and replacing the state of an object key. */
export function serviceRoutes(ctx: AdminContext) {
  const { registry, config } = ctx;
  const serviceOr404 = (name: string): ServiceSchema => {
    const s = registry.service(name);
    if (!s) throw keelError('KEEL0004', { what: 'service', name });
    return s;
  };
  return async (r: FastifyInstance) => {
    r.get('/services', async () => ({ services: registry.services().map((s) => serviceView(s, config)) }));
    r.get<{ Params: { name: string } }>('/services/:name', { schema: { params: serviceParams } }, async (req) => serviceView(serviceOr404(req.params.name), config));
    r.get<{ Params: { name: string } }>('/services/:name/handlers', { schema: { params: serviceParams } }, async (req) => ({
      handlers: serviceOr404(req.params.name).handlers.map(handlerView),
    }));
    r.get<{ Params: { name: string; handler: string } }>('/services/:name/handlers/:handler', { schema: { params: handlerParams } }, async (req) => {
      const s = serviceOr404(req.params.name);
      const h = s.handlers.find((x) => x.name === req.params.handler);
      if (!h) throw keelError('KEEL0004', { what: 'handler', name: `${s.name}/${req.params.handler}` });
      return handlerView(h);
    });

    r.patch<{ Params: { name: string }; Body: unknown }>('/services/:name', { schema: { params: serviceParams } }, async (req) => {
      const change = serviceChange(req.body);
      const s = Object.keys(change).length === 0 ? serviceOr404(req.params.name) : await registry.modifyService(req.params.name, change);
      return serviceView(s, config);
    });

    r.post<{ Params: { name: string }; Body: StateBody }>('/services/:name/state', { schema: { params: serviceParams, body: stateBody } }, async (req, reply) => {
      const s = serviceOr404(req.params.name);
      if (s.ty === 'Service') throw new KeelError('KEEL0002', 'Cannot modify state for service type Service');
      const { object_key, new_state } = req.body;
      const entries = new Map<string, Buffer>(Object.entries(new_state).map(([k, v]) => [k, Buffer.from(v)]));
      const src = ctx.source();
      if (!src.setState) throw new KeelError('KEEL0009', 'modifying state is not available on this server');
      const version = req.body.version ?? undefined;
      if (version !== undefined) {
        // As Restate: a stale version is answered 202 and changes nothing.
        const current: Array<[string, Buffer]> = [];
        // The unscoped object's state: the one this route changes.
        for await (const e of src.state()) if (e.service === s.name && e.key === object_key && e.scope === undefined) current.push([e.state_key, e.value]);
        if (stateVersion(current) !== version) {
          req.log.warn({ service: s.name, key: object_key }, 'state update skipped: version does not match the current state');
          return reply.status(202).send();
        }
      }
      await src.setState(s.name, object_key, entries, version);
      return reply.status(202).send();
    });
  };
}

/** A state TTL longer than this is a mistake (and past 2^53 ms not a number the fold can keep). */
const MAX_STATE_TTL_MS = 100 * 365 * 86_400_000;

const DURATION_FIELDS = ['idempotency_retention', 'workflow_completion_retention', 'journal_retention', 'inactivity_timeout', 'abort_timeout'] as const;

/**
 * The body of `PATCH /services/{name}` (Restate's ModifyServiceRequest, as `restate services
 * config patch` sends it): a field absent or null is left as it is; durations as the
 * configuration writes them ("2d", "1h 30m") or ISO 8601 ("P2D").
 */
function serviceChange(body: unknown): ServiceChange {
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body)) throw new KeelError('KEEL0001', 'the body must be a JSON object of the service options to change');
  const fields = body as Record<string, unknown>;
  const known = new Set<string>(['public', ...DURATION_FIELDS, 'state_ttl', 'state_ttl_from']);
  const unknown = Object.keys(fields).filter((k) => !known.has(k));
  if (unknown.length > 0) throw new KeelError('KEEL0002', `unknown field ${unknown.map((k) => `'${k}'`).join(', ')}: the options a service has are ${[...known].join(', ')}`);
  const change: ServiceChange = {};
  if (fields.public !== undefined && fields.public !== null) {
    if (typeof fields.public !== 'boolean') throw keelError('KEEL0002', { field: 'public', expected: 'true or false' });
    change.public = fields.public;
  }
  for (const f of DURATION_FIELDS) {
    const v = fields[f];
    if (v === undefined || v === null) continue;
    const ms = typeof v === 'string' ? parseDuration_ms(v) : undefined;
    if (ms === undefined) throw keelError('KEEL0002', { field: f, expected: `a duration such as "2d", "1h 30m" or "P2D" (got ${JSON.stringify(v)})` });
    change[`${f}_ms`] = ms;
  }
  // Keel's own: state TTL of a virtual object or workflow ("0" removes it), counted from the
  // last write or the last access (the default).
  if (fields.state_ttl !== undefined && fields.state_ttl !== null) {
    const ms = typeof fields.state_ttl === 'string' ? parseDuration_ms(fields.state_ttl) : undefined;
    if (ms === undefined) throw keelError('KEEL0002', { field: 'state_ttl', expected: `a duration such as "30d" or "P30D", or "0" to remove it (got ${JSON.stringify(fields.state_ttl)})` });
    const zero = ms === 0 && String(fields.state_ttl).trim() === '0';
    if ((ms < 1000 && !zero) || ms > MAX_STATE_TTL_MS) throw keelError('KEEL0002', { field: 'state_ttl', expected: `from 1s to 100 years, or "0" to remove it (got ${JSON.stringify(fields.state_ttl)})` });
    change.state_ttl_ms = ms;
  }
  if (fields.state_ttl_from !== undefined && fields.state_ttl_from !== null) {
    if (fields.state_ttl_from !== 'last_write' && fields.state_ttl_from !== 'last_access') throw keelError('KEEL0002', { field: 'state_ttl_from', expected: '"last_write" or "last_access"' });
    change.state_ttl_on_access = fields.state_ttl_from === 'last_access';
  }
  return change;
}
