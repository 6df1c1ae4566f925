// Bearer tokens for the ingress and admin APIs (off unless tokens are configured). Every
// request but the health checks must carry `Authorization: Bearer <token>`; tokens are compared
// in constant time, by their SHA-256 digests so that their lengths leak nothing either.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '../common/logger.js';
import type { EdgeErrors } from './edge.js';

export interface BearerAuthOptions {
  tokens: readonly string[];
  /** Named in `WWW-Authenticate` (`keel-ingress`, `keel-admin`). */
  realm: string;
  /** Paths (without the query) that stay open: health checks. */
  open: (path: string) => boolean;
  errors: EdgeErrors;
  logger: Logger;
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/**
 * The tokens a server takes: its own and, where it has any, the cluster's (a node's requests to
 * another carry the cluster's token in place of the client's, which the node asked checked).
 */
export function acceptedTokens(own: readonly string[], cluster: readonly string[] | undefined): string[] {
  return own.length === 0 ? [] : [...own, ...(cluster ?? [])];
}

/** Whether a request's `Authorization: Bearer` carries one of `tokens`. */
export function bearerMatcher(tokens: readonly string[]): (header: string | undefined) => boolean {
  const accepted = tokens.map(digest);
  return (header) => {
    const m = typeof header === 'string' ? /^Bearer[ \t]+([\x21-\x7e]+)[ \t]*$/i.exec(header) : null;
    if (m === null) return false;
    const d = digest(m[1]!);
    // Every token is compared, whichever matches: the time taken says nothing about which.
    let ok = false;
    for (const a of accepted) ok = timingSafeEqual(a, d) || ok;
    return ok;
  };
}

/** Installs the check as the instance's first onRequest hook, so every route (later ones too, /metrics) is covered. */
export function bearerAuth(app: FastifyInstance, o: BearerAuthOptions): void {
  if (o.tokens.length === 0) return;
  const matches = bearerMatcher(o.tokens);
  app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
    const path = req.url.split('?', 1)[0]!;
    if (o.open(path)) return undefined;
    const header = req.headers.authorization;
    if (matches(header)) return undefined;
    const presented = header !== undefined;
    if (presented) o.logger.warn({ code: 'KEEL0401', method: req.method, url: path, remote: req.ip }, 'request refused: invalid bearer token');
    const message = presented
      ? '[KEEL0401] the bearer token is not valid'
      : '[KEEL0401] authentication required: send Authorization: Bearer <token>';
    const challenge = `Bearer realm="${o.realm}"${presented ? ', error="invalid_token"' : ''}`;
    return reply.code(401).headers({ ...o.errors.headers, 'www-authenticate': challenge }).send(o.errors.body('KEEL0401', message, 401));
  });
}
