import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { KeelError } from '../errors/index.js';

/** The admin API's error body, as Restate shapes it. */
export function errorBody(message: string, code: string | null): { message: string; restate_code: string | null } {
  return { message, restate_code: code };
}

/** A route-schema violation, named by field, as KEEL0001 (the body as a whole) or KEEL0002 (a field). */
function schemaError(err: FastifyError): KeelError {
  const first = err.validation?.[0];
  const where = err.validationContext ?? 'body';
  if (first === undefined) return new KeelError('KEEL0001', err.message, 400);
  const missing = (first.params as { missingProperty?: string } | undefined)?.missingProperty;
  const path = first.instancePath.replace(/^\//, '').replaceAll('/', '.');
  const field = missing ?? path;
  if (field === '' && where === 'body') return new KeelError('KEEL0001', `the request body ${first.message ?? 'is not valid'}`, 400);
  const what = missing !== undefined ? 'is required' : (first.message ?? 'is not valid');
  return new KeelError('KEEL0002', `the ${where === 'body' ? 'field' : where === 'params' ? 'path parameter' : 'query parameter'} ${field} ${what}`, 400);
}

/** One error handler: every error answers with its stable code, and is logged at the level it deserves. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((raw: unknown, req: FastifyRequest, reply: FastifyReply) => {
    const fe = raw as FastifyError;
    const err = raw instanceof KeelError ? raw : fe.validation ? schemaError(fe) : undefined;
    if (err !== undefined) {
      // What the request or an endpoint got wrong is a warning; only the server's own faults are errors.
      const lvl = err.status < 500 || err.code.startsWith('META') ? 'warn' : 'error';
      req.log[lvl]({ code: err.code, status: err.status, method: req.method, url: req.url, err: err.message }, 'admin request failed');
      return reply.status(err.status).send(errorBody(err.display, err.code));
    }
    const status = typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 600 ? fe.statusCode : 500;
    if (status >= 500) {
      req.log.error({ err: raw, code: 'RT0006', method: req.method, url: req.url }, 'admin request failed');
      return reply.status(status).send(errorBody(`[RT0006] internal error: ${fe.message ?? String(raw)}`, 'RT0006'));
    }
    // Fastify's own 4xx (body too large, bad content length, ...): the request as a whole is wrong.
    req.log.warn({ status, code: 'KEEL0001', method: req.method, url: req.url, err: fe.message }, 'admin request rejected');
    return reply.status(status).send(errorBody(`[KEEL0001] ${fe.message}`, 'KEEL0001'));
  });
  app.setNotFoundHandler((req, reply) => {
    reply.status(404).send(errorBody(`[KEEL0004] No route for ${req.method} ${req.url.split('?')[0]}`, 'KEEL0004'));
  });
}
