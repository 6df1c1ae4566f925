import type { FastifyInstance, FastifyReply } from 'fastify';
import { InvocationId } from '../../common/ids.js';
import { KeelError } from '../../errors/index.js';
import type { AdminContext } from '../context.js';
import type { ManageAction } from '../introspection.js';
import { errorBody } from '../errors.js';

const MANAGE_ACTIONS: readonly ManageAction[] = ['cancel', 'kill', 'purge', 'pause', 'resume', 'restart-as-new'];

function checkInvocationId(id: string): void {
  if (!InvocationId.parse(id)) throw new KeelError('KEEL0003', "The request field 'invocation_id' is invalid. Reason: bad format");
}

/** The answer of a manage action, with Restate's messages where the source gave no body. */
function manageReply(reply: FastifyReply, id: string, action: ManageAction, r: { status: number; body?: unknown }): FastifyReply {
  let body = r.body;
  if (r.status >= 400) {
    const code = r.status === 404 ? 'KEEL0004' : 'KEEL0008';
    if (body === undefined || body === null || body === '') {
      const message =
        r.status === 404
          ? `The requested invocation '${id}' does not exist`
          : r.status === 409 && (action === 'kill' || action === 'cancel')
            ? `The invocation '${id}' was already completed.`
            : `Cannot ${action} invocation '${id}'`;
      body = errorBody(`[${code}] ${message}`, code);
    } else if (typeof body === 'string') {
      body = errorBody(`[${code}] ${body}`, code);
    } else if (typeof body === 'object' && (body as { restate_code?: unknown }).restate_code === null) {
      body = errorBody(`[${code}] ${(body as { message: string }).message}`, code);
    }
  }
  reply.status(r.status);
  return body === undefined ? reply.send() : reply.send(body);
}

/** `/invocations/{id}/{action}` (cancel, kill, purge, pause, resume, restart-as-new), and the deprecated DELETE. */
export function invocationRoutes(ctx: AdminContext) {
  return async (r: FastifyInstance) => {
    const params = { type: 'object', properties: { id: { type: 'string', maxLength: 128 }, action: { type: 'string', maxLength: 32 } } } as const;
    r.patch<{ Params: { id: string; action: string } }>('/invocations/:id/:action', { schema: { params } }, async (req, reply) => {
      const { id, action } = req.params;
      if (!MANAGE_ACTIONS.includes(action as ManageAction)) {
        throw new KeelError('KEEL0004', `No route for PATCH ${req.url.split('?')[0]}`);
      }
      checkInvocationId(id);
      return manageReply(reply, id, action as ManageAction, await ctx.source().manage(id, action as ManageAction));
    });

    // Deprecated form: DELETE /invocations/{id}?mode=cancel|kill|purge (default cancel), 202.
    r.delete<{ Params: { id: string }; Querystring: { mode?: string } }>(
      '/invocations/:id',
      { schema: { params, querystring: { type: 'object', properties: { mode: { type: 'string', maxLength: 16 } } } } },
      async (req, reply) => {
        const { id } = req.params;
        const mode = (req.query.mode ?? 'cancel').toLowerCase();
        if (mode !== 'cancel' && mode !== 'kill' && mode !== 'purge') {
          throw new KeelError('KEEL0002', `Invalid URL: unknown deletion mode '${req.query.mode}', expected cancel, kill or purge`);
        }
        checkInvocationId(id);
        const r = await ctx.source().manage(id, mode);
        if (r.status >= 400) return manageReply(reply, id, mode, r);
        return reply.status(202).send();
      },
    );
  };
}
