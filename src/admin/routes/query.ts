import type { FastifyInstance } from 'fastify';
import type { AdminContext } from '../context.js';
import { toArrow, toJson } from '../sql.js';

interface QueryBody {
  query: string;
}

const queryBody = { type: 'object', required: ['query'], properties: { query: { type: 'string' } } } as const;

/** `POST /query`: SQL over the introspection tables, answered as JSON or an Arrow IPC stream. */
export function queryRoutes(ctx: AdminContext) {
  return async (r: FastifyInstance) => {
    r.post<{ Body: QueryBody }>('/query', { schema: { body: queryBody } }, async (req, reply) => {
      const json = String(req.headers.accept ?? '').includes('application/json');
      const result = await ctx.engine.run(req.body.query);
      // exactly `application/json`: with `; charset=utf-8` the CLI says the server "lacks JSON /query support"
      if (json) return reply.status(200).header('content-type', 'application/json').send(Buffer.from(JSON.stringify(toJson(result))));
      return reply.status(200).type('application/vnd.apache.arrow.stream').send(Buffer.from(await toArrow(result)));
    });
  };
}
