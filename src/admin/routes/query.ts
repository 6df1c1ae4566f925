import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { AdminContext } from '../context.js';

interface QueryBody {
  query: string;
}

const queryBody = { type: 'object', required: ['query'], properties: { query: { type: 'string' } } } as const;

const bytes = (u: Uint8Array): Buffer => Buffer.from(u.buffer, u.byteOffset, u.byteLength);

/**
 * `POST /query`: SQL over the introspection tables, answered as JSON (`accept:
 * application/json`) or an Arrow IPC stream (anything else, as the restate CLI expects). The
 * query runs in the query engine's process; a large answer streams out chunk by chunk.
 */
export function queryRoutes(ctx: AdminContext) {
  return async (r: FastifyInstance) => {
    r.post<{ Body: QueryBody }>('/query', { schema: { body: queryBody } }, async (req, reply) => {
      const json = String(req.headers.accept ?? '').includes('application/json');
      const gone = new AbortController();
      reply.raw.once('close', () => reply.raw.writableFinished || gone.abort());
      const answer = await ctx.engine.query(req.body.query, json ? 'json' : 'arrow', { signal: gone.signal });
      const body = answer.whole !== undefined ? bytes(answer.whole) : Readable.from(answer.body, { objectMode: false });
      // exactly `application/json`: with `; charset=utf-8` the CLI says the server "lacks JSON /query support"
      if (json) return reply.status(200).header('content-type', 'application/json').send(body);
      return reply.status(200).type('application/vnd.apache.arrow.stream').send(body);
    });
  };
}
