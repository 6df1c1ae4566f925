import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { InvocationId, decodeAwakeableId, idempotentInvocationId, workflowInvocationId } from '../common/ids.js';
import type { Worker } from '../partition/worker.js';
import { attachAndRespond, inFlight, invoke, type InvokeDeps } from './invoke.js';
import { ingressError, respond } from './respond.js';

type Target =
  | { target: 'invocation'; invocationId: string }
  | { target: 'workflow'; workflowName: string; workflowKey: string }
  | { target: 'idempotentInvocation'; service: string; key?: string; handler: string; idempotencyKey: string };

function idOf(t: Target): InvocationId | string {
  switch (t?.target) {
    case 'invocation':
      return InvocationId.parse(t.invocationId ?? '') ?? `invalid invocation id '${t.invocationId}'`;
    case 'workflow':
      return workflowInvocationId(t.workflowName ?? '', t.workflowKey ?? '');
    case 'idempotentInvocation':
      return idempotentInvocationId(t.service ?? '', t.key ?? '', t.handler ?? '', t.idempotencyKey ?? '');
    default:
      return 'the body must name a target: invocation, workflow or idempotentInvocation';
  }
}

/** Attach (wait for the result) or output (the result now, 470 while running). */
async function attachOrOutput(deps: InvokeDeps, reply: FastifyReply, id: InvocationId | string, mode: string): Promise<FastifyReply> {
  if (typeof id === 'string') return ingressError(reply, 'KEEL0012', id);
  const s = deps.worker.invocation(id);
  if (s === undefined) return ingressError(reply, 'KEEL0004', `invocation '${id.text}' not found`);
  const handler = deps.registry.service(s.service)?.handlers.find((h) => h.name === s.handler);
  if (mode === 'output') {
    if (s.status !== 'completed') return ingressError(reply, 'KEEL0013', `invocation '${id.text}' has not completed yet`);
    return respond(reply, s, handler);
  }
  if (mode !== 'attach') return ingressError(reply, 'KEEL0011', `no route for ${mode}`);
  return inFlight(deps, () => attachAndRespond(deps, reply, id, handler));
}

async function completeAwakeable(worker: Worker, req: FastifyRequest, reply: FastifyReply, awakeable: string, how: string): Promise<FastifyReply> {
  const a = decodeAwakeableId(awakeable);
  if (a === undefined) return ingressError(reply, 'KEEL0012', `invalid awakeable id '${awakeable}'`);
  const body = req.body instanceof Buffer ? req.body : Buffer.alloc(0);
  let result;
  if (how === 'resolve') result = { value: body };
  else if (how === 'reject') result = { failure: { code: 500, message: body.toString('utf8') } };
  else return ingressError(reply, 'KEEL0011', `no route for ${how}: use resolve or reject`);
  await worker.append(a.invocation, { kind: 'signal', signal: { invocation_id: a.invocation.bytes, idx: a.signalIndex, ...result } });
  return reply.code(202).send();
}

export function restateRoutes(app: FastifyInstance, deps: InvokeDeps): void {
  const { worker } = deps;
  const segs = (req: FastifyRequest) => (req.params as { '*': string })['*'].split('/').filter((s) => s.length > 0).map(decodeURIComponent);

  app.get('/restate/health', async () => ({}));

  // Awakeables, long and short form.
  for (const prefix of ['/restate/awakeables', '/restate/a']) {
    app.post(`${prefix}/:id/:how`, (req, reply) => {
      const { id, how } = req.params as { id: string; how: string };
      return completeAwakeable(worker, req, reply, id, how);
    });
    app.route({
      method: ['GET', 'PUT', 'DELETE', 'PATCH'],
      url: `${prefix}/:id/:how`,
      handler: async (_req, reply) => ingressError(reply, 'KEEL0005', 'method not allowed: awakeables are completed with POST'),
    });
  }

  // /restate/invocation/{id}/attach|output and /restate/invocation/{svc}/[{key}/]{handler}/{idem}/attach|output
  app.get('/restate/invocation/*', (req, reply) => {
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
    app.post(`/restate/${mode}`, (req, reply) => attachOrOutput(deps, reply, idOf(jsonBody(req) as Target), mode));
  }
  app.post('/restate/lookup', (req, reply) => {
    const id = idOf(jsonBody(req) as Target);
    if (typeof id === 'string') return ingressError(reply, 'KEEL0012', id);
    return reply.send({ invocationId: id.text });
  });
  app.post('/restate/call/*', (req, reply) => invoke(deps, req, reply, segs(req), false));
  app.post('/restate/send/*', (req, reply) => invoke(deps, req, reply, segs(req), true));
}

function jsonBody(req: FastifyRequest): unknown {
  try {
    return JSON.parse((req.body as Buffer | undefined)?.toString('utf8') ?? 'null');
  } catch {
    return null;
  }
}
