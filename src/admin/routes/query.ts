import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { AdminContext } from '../context.js';

interface QueryBody {
  query: string;
  params?: Array<string | null>;
}

const queryBody = {
  type: 'object',
  required: ['query'],
  properties: { query: { type: 'string' }, params: { type: 'array', maxItems: 65_535, items: { type: ['string', 'null'] } } },
} as const;

/**
 * The answer as the PostgreSQL wire protocol carries it (RowDescription, then DataRows): what a
 * standby's pg server (9071) asks the active node for, and relays to its client as it is.
 */
export const PG_ANSWER_TYPE = 'application/vnd.keel.pg-rows';

const bytes = (u: Uint8Array): Buffer => Buffer.from(u.buffer, u.byteOffset, u.byteLength);

/**
 * `POST /query`: SQL over the introspection tables, answered as JSON (`accept:
 * application/json`) or an Arrow IPC stream (anything else, as the restate CLI expects). The
 * query runs in the query engine's process; a large answer streams out chunk by chunk.
 */
export function queryRoutes(ctx: AdminContext) {
  return async (r: FastifyInstance) => {
    r.post<{ Body: QueryBody }>('/query', { schema: { body: queryBody } }, async (req, reply) => {
      const accept = String(req.headers.accept ?? '');
      const json = accept.includes('application/json');
      const gone = new AbortController();
      reply.raw.once('close', () => reply.raw.writableFinished || gone.abort());
      if (accept === PG_ANSWER_TYPE) {
        const answer = await ctx.engine.query(req.body.query, 'pg', { signal: gone.signal, ...(req.body.params !== undefined ? { params: req.body.params } : {}) });
        const head = answer.head ?? new Uint8Array(0);
        const body = Readable.from((async function* () {
          yield bytes(head);
          for await (const chunk of answer.body) yield bytes(chunk);
        })(), { objectMode: false });
        return reply.status(200).type(PG_ANSWER_TYPE).header('x-keel-rows', String(answer.rows)).header('x-keel-head-bytes', String(head.length)).send(body);
      }
      const answer = await ctx.engine.query(req.body.query, json ? 'json' : 'arrow', { signal: gone.signal });
      const body = answer.whole !== undefined ? bytes(answer.whole) : Readable.from(answer.body, { objectMode: false });
      // exactly `application/json`: with `; charset=utf-8` the CLI says the server "lacks JSON /query support"
      if (json) return reply.status(200).header('content-type', 'application/json').send(body);
      return reply.status(200).type('application/vnd.apache.arrow.stream').send(body);
    });
  };
}
