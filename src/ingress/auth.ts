// Bearer tokens for the ingress and admin APIs (off unless tokens are configured). Every
// request but the health checks must carry `Authorization: Bearer <token>`; tokens are compared
// in constant time, by their SHA-256 digests so that their lengths leak nothing either.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '../common/logger.js';
import { KeelError } from '../errors/index.js';
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
 * The headers of a request between the nodes of a cluster (cluster-peers.ts, forwarding.ts): the
 * node that sent it, how many nodes it went through, the cluster's own token. They describe the
 * hop: never stored with an invocation nor handed to a handler, and never taken from a client.
 */
export const NODE_HEADERS = { forwarded_by: 'x-keel-forwarded-by', hops: 'x-keel-hops', token: 'x-keel-cluster-token' } as const;
export const NODE_HEADER_NAMES: readonly string[] = Object.values(NODE_HEADERS);

/** Whether a header's value is one of `tokens`, compared in constant time. */
export function tokenMatcher(tokens: readonly string[]): (value: string | string[] | undefined) => boolean {
  const accepted = tokens.map(digest);
  return (value) => {
    if (typeof value !== 'string') return false;
    const d = digest(value);
    // Every token is compared, whichever matches: the time taken says nothing about which.
    let ok = false;
    for (const a of accepted) ok = timingSafeEqual(a, d) || ok;
    return ok;
  };
}

/**
 * Installs the check as the instance's first onRequest hook, so every route (later ones too,
 * /metrics) is covered. `cluster`: a request from another node of the cluster passes on the
 * cluster's token (its own header), whatever `authorization` it carries for its client.
 */
export function bearerAuth(app: FastifyInstance, o: BearerAuthOptions & { cluster?: readonly string[] }): void {
  if (o.tokens.length === 0) return;
  const matches = tokenMatcher(o.tokens);
  const fromNode = tokenMatcher(o.cluster ?? []);
  const bearer = (header: string | undefined): string | undefined => (typeof header === 'string' ? /^Bearer[ \t]+([\x21-\x7e]+)[ \t]*$/i.exec(header)?.[1] : undefined);
  app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
    const path = req.url.split('?', 1)[0]!;
    if (o.open(path)) return undefined;
    const header = req.headers.authorization;
    if (matches(bearer(header)) || fromNode(req.headers[NODE_HEADERS.token])) return undefined;
    const presented = header !== undefined;
    if (presented) o.logger.warn({ code: 'KEEL0401', method: req.method, url: path, remote: req.ip }, 'request refused: invalid bearer token');
    const err = new KeelError('KEEL0401', presented ? 'the bearer token is not valid' : 'authentication required: send Authorization: Bearer <token>');
    const challenge = `Bearer realm="${o.realm}"${presented ? ', error="invalid_token"' : ''}`;
    return reply.code(err.status).headers({ ...o.errors.headers, 'www-authenticate': challenge }).send(o.errors.body(err.code, err.display, err.status));
  });
}
