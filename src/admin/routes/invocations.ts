import type { FastifyInstance, FastifyReply } from 'fastify';
import { InvocationId } from '../../common/ids.js';
import { KeelError } from '../../errors/index.js';
import type { AdminContext } from '../context.js';
import type { ManageAction, ManageAnswer } from '../introspection.js';

const MANAGE_ACTIONS: readonly ManageAction[] = ['cancel', 'kill', 'purge', 'pause', 'resume', 'restart-as-new'];

function checkInvocationId(id: string): void {
  if (!InvocationId.parse(id)) throw new KeelError('KEEL0003', "The request field 'invocation_id' is invalid. Reason: bad format");
}

/** The answer of a manage action that was done (a refusal is thrown, and answered by the error handler). */
function manageReply(reply: FastifyReply, r: ManageAnswer): FastifyReply {
  reply.status(r.status);
  return r.body === undefined ? reply.send() : reply.send(r.body);
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
      return manageReply(reply, await ctx.source().manage(id, action as ManageAction));
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
        await ctx.source().manage(id, mode);
        return reply.status(202).send();
      },
    );
  };
}
