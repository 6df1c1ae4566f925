import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { InvocationId, decodeAwakeableId, idempotentInvocationId, workflowInvocationId } from '../common/ids.js';
import { restrictedValueError } from '../common/limit-rules.js';
import { KeelError } from '../errors/index.js';
import type { PartitionGateway } from '../partition/gateway.js';
import type { InvocationStatus } from '../partition/state.js';
import { MAX_KEY_CHARS, MAX_NAME_CHARS } from './limits.js';
import { inFlight, invoke, refuseFlow, respondCompleted, type InvokeDeps } from './invoke.js';
import { pathSegments } from './paths.js';
import { ingressError, respond } from './respond.js';

type Target = { scope?: string | null } & (
  | { target: 'invocation'; invocationId: string }
  | { target: 'workflow'; workflowName: string; workflowKey: string }
  | { target: 'idempotentInvocation'; service: string; key?: string; handler: string; idempotencyKey: string }
);


const name = { type: 'string', minLength: 1, maxLength: MAX_NAME_CHARS } as const;
const key = { type: 'string', maxLength: MAX_KEY_CHARS } as const;
const when = (target: string, required: string[]) => ({ if: { required: ['target'], properties: { target: { const: target } } }, then: { required } });

/** The body of POST /restate/attach|output|lookup: which invocation, by id, workflow or idempotency key. */
const targetBody = {
  type: 'object',
  required: ['target'],
  properties: {
    target: { enum: ['invocation', 'workflow', 'idempotentInvocation'] },
    invocationId: { type: 'string', maxLength: 128 },
    workflowName: name,
    workflowKey: key,
    service: name,
    key,
    handler: name,
    idempotencyKey: { type: 'string', minLength: 1, maxLength: MAX_KEY_CHARS },
    scope: { type: ['string', 'null'], maxLength: MAX_NAME_CHARS },
  },
  allOf: [when('invocation', ['invocationId']), when('workflow', ['workflowName', 'workflowKey']), when('idempotentInvocation', ['service', 'handler', 'idempotencyKey'])],
} as const;

function idOf(t: Target): InvocationId | string {
  // A scope names the scope's invocation (an absent or null one, the unscoped one).
  const scope = t.scope ?? undefined;
  const bad = scope === undefined ? undefined : restrictedValueError(scope);
  if (bad !== undefined) return `bad scope value: ${bad}`;
  switch (t.target) {
    case 'invocation':
      return InvocationId.parse(t.invocationId) ?? `the field invocationId is not a valid invocation id: '${t.invocationId}'`;
    case 'workflow':
      return workflowInvocationId(t.workflowName, t.workflowKey, scope);
    case 'idempotentInvocation':
      return idempotentInvocationId(t.service, t.key ?? '', t.handler, t.idempotencyKey, scope);
  }
}

/** Attach (wait for the result) or output (the result now, 470 while running). */
async function attachOrOutput(deps: InvokeDeps, reply: FastifyReply, id: InvocationId | string, mode: string): Promise<FastifyReply> {
  if (typeof id === 'string') return ingressError(reply, 'KEEL0012', id);
  const notFound = () => ingressError(reply, 'KEEL0004', `invocation '${id.text}' not found`);
  const handlerOf = (s: InvocationStatus) => deps.registry.service(s.service)?.handlers.find((h) => h.name === s.handler);
  if (mode === 'output') {
    const out = await deps.partitions.output(id);
    if (out.kind === 'not_found') return notFound();
    if (out.kind === 'not_completed') return ingressError(reply, 'KEEL0013', `invocation '${id.text}' has not completed yet`);
    return respond(reply, out.status, handlerOf(out.status));
  }
  if (mode !== 'attach') return ingressError(reply, 'KEEL0011', `no route for ${mode}`);
  const s = await inFlight(deps, () => deps.partitions.attach(id));
  return s === undefined ? notFound() : respondCompleted(reply, s, handlerOf(s));
}

async function completeAwakeable(partitions: PartitionGateway, req: FastifyRequest, reply: FastifyReply, awakeable: string, how: string): Promise<FastifyReply> {
  const a = decodeAwakeableId(awakeable);
  if (a === undefined) return ingressError(reply, 'KEEL0012', `invalid awakeable id '${awakeable}'`);
  const body = req.body instanceof Buffer ? req.body : Buffer.alloc(0);
  let result;
  if (how === 'resolve') result = { value: body };
  else if (how === 'reject') result = { failure: { code: 500, message: body.toString('utf8') } };
  else return ingressError(reply, 'KEEL0011', `no route for ${how}: use resolve or reject`);
  await partitions.append(a.invocation, { kind: 'signal', signal: { invocation_id: a.invocation.bytes, idx: a.signalIndex, ...result } });
  return reply.code(202).send();
}

/** The decoded path segments after the route's first `skip` ones (fastify's wildcard is decoded once already: never again). */
const segs = (req: FastifyRequest, skip = 2) => pathSegments(req.url).slice(skip);

/** Routes whose body is a JSON target: parsed and checked against `targetBody` before the handler. */
async function targetRoutes(app: FastifyInstance, deps: InvokeDeps): Promise<void> {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, JSON.parse(String(body)));
    } catch (err) {
      done(new KeelError('KEEL0001', `the request body is not valid JSON: ${(err as Error).message}`), undefined);
    }
  });
  for (const mode of ['attach', 'output']) {
    app.post<{ Body: Target }>(`/restate/${mode}`, { schema: { body: targetBody } }, (req, reply) => attachOrOutput(deps, reply, idOf(req.body), mode));
  }
  app.post<{ Body: Target }>('/restate/lookup', { schema: { body: targetBody } }, async (req, reply) => {
    const id = idOf(req.body);
    if (typeof id === 'string') return ingressError(reply, 'KEEL0002', id);
    return reply.send({ invocationId: id.text });
  });
}

export async function restateRoutes(app: FastifyInstance, deps: InvokeDeps): Promise<void> {
  const { partitions } = deps;

  app.get('/restate/health', async () => ({}));

  // Awakeables, long and short form.
  for (const prefix of ['/restate/awakeables', '/restate/a']) {
    app.post(`${prefix}/:id/:how`, (req, reply) => {
      const { id, how } = req.params as { id: string; how: string };
      return completeAwakeable(partitions, req, reply, id, how);
    });
    app.route({
      method: ['GET', 'PUT', 'DELETE', 'PATCH'],
      url: `${prefix}/:id/:how`,
      handler: async (_req, reply) => ingressError(reply, 'KEEL0005', 'method not allowed: awakeables are completed with POST'),
    });
  }

  // /restate/invocation/{id}/attach|output and /restate/invocation/{svc}/[{key}/]{handler}/{idem}/attach|output
  app.get('/restate/invocation/*', async (req, reply) => {
    const s = segs(req);
    const mode = s.pop() ?? '';
    if (s.length === 1) return attachOrOutput(deps, reply, InvocationId.parse(s[0]!) ?? `invalid invocation id '${s[0]}'`, mode);
    if (s.length === 3) return attachOrOutput(deps, reply, idempotentInvocationId(s[0]!, '', s[1]!, s[2]!), mode);
    if (s.length === 4) return attachOrOutput(deps, reply, idempotentInvocationId(s[0]!, s[1]!, s[2]!, s[3]!), mode);
    return ingressError(reply, 'KEEL0011', `no route for ${req.url}`);
  });
  app.get('/restate/workflow/:name/:key/:mode', (req, reply) => {
    const { name, key, mode } = req.params as { name: string; key: string; mode: string };
    return attachOrOutput(deps, reply, workflowInvocationId(name, key), mode);
  });

  // Restate 1.7 forms.
  for (const mode of ['attach', 'output']) {
    app.get(`/restate/${mode}/:id`, (req, reply) => {
      const { id } = req.params as { id: string };
      return attachOrOutput(deps, reply, InvocationId.parse(id) ?? `invalid invocation id '${id}'`, mode);
    });
  }
  await app.register(targetRoutes, deps);
  app.post('/restate/call/*', async (req, reply) => invoke(deps, req, reply, segs(req), false));
  app.post('/restate/send/*', async (req, reply) => invoke(deps, req, reply, segs(req), true));
  // /restate/scope/{scope}/call|send/{svc}/[{key}/]{handler}
  app.post('/restate/scope/*', async (req, reply) => {
    // An empty scope (`/restate/scope//call/...`) would vanish from the segments.
    if (req.url.startsWith('/restate/scope//')) return refuseFlow(deps, req, reply, 'bad scope value: value cannot be empty');
    const [scope, verb, ...rest] = segs(req);
    if (scope === undefined || (verb !== 'call' && verb !== 'send')) {
      return ingressError(reply, 'KEEL0011', `no route for ${req.url}: use /restate/scope/{scope}/call/{service}/[{key}/]{handler} or /restate/scope/{scope}/send/...`);
    }
    return invoke(deps, req, reply, rest, verb === 'send', scope);
  });
}
