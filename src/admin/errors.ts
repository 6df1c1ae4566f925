import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { catalogue, KeelError } from '../errors/index.js';
import { discardOversizedBody, schemaError, type PartitionRouting } from '../ingress/edge.js';
import { NotLedHereError } from '../partition/errors.js';

/** The admin API's error body, as Restate shapes it. */
export function errorBody(message: string, code: string | null): { message: string; restate_code: string | null } {
  return { message, restate_code: code };
}

/** Answers with `err`: the status its code has in the catalogue, the code in front of the message. */
export function refuse(reply: FastifyReply, err: KeelError): FastifyReply {
  return reply.status(err.status).send(errorBody(err.display, err.code));
}

/** One error handler: every error answers with its stable code, and is logged at the level it deserves. */
export function installErrorHandling(app: FastifyInstance, routing: PartitionRouting = {}): void {
  app.setErrorHandler((raw: unknown, req: FastifyRequest, reply: FastifyReply) => {
    if (raw instanceof NotLedHereError && routing.elsewhere !== undefined) return routing.elsewhere(raw.partition, req, reply);
    const fe = raw as FastifyError;
    const err = raw instanceof KeelError ? raw : fe.validation ? schemaError(fe) : undefined;
    if (err !== undefined) {
      // What the request or an endpoint got wrong is a warning; only the server's own faults are
      // errors; what is routine (a client that left) is lower, as its catalogue entry says.
      const lvl = catalogue.get(err.code)?.log_level ?? (err.status < 500 || err.code.startsWith('META') ? 'warn' : 'error');
      req.log[lvl]({ code: err.code, status: err.status, method: req.method, url: req.url, err: err.message }, 'admin request failed');
      return refuse(reply, err);
    }
    const status = typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 600 ? fe.statusCode : 500;
    if (status >= 500) {
      req.log.error({ err: raw, code: 'RT0006', method: req.method, url: req.url }, 'admin request failed');
      return reply.status(status).send(errorBody(`[RT0006] internal error: ${fe.message ?? String(raw)}`, 'RT0006'));
    }
    // Fastify's own 4xx (body too large, bad content length, ...): the request as a whole is wrong.
    const code = status === 413 ? 'KEEL0413' : 'KEEL0001';
    if (code === 'KEEL0413') discardOversizedBody(req, reply);
    req.log.warn({ status, code, method: req.method, url: req.url, err: fe.message }, 'admin request rejected');
    return reply.status(status).send(errorBody(`[${code}] ${fe.message}`, code));
  });
  app.setNotFoundHandler((req, reply) => {
    refuse(reply, new KeelError('KEEL0004', `No route for ${req.method} ${req.url.split('?')[0]}`));
  });
}
