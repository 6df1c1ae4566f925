import type { FastifyReply } from 'fastify';
import { catalogue, type ErrorCode } from '../errors/index.js';
import type { InvocationStatus } from '../partition/state.js';

interface OutputRules {
  output_content_type?: string;
  output_set_content_type_if_empty: boolean;
}

/**
 * Errors the ingress itself raises: `{code, message}` as Restate shapes them (code is the HTTP
 * status), plus the stable code in `restate_code` and in front of the message; the status is
 * the catalogue's unless given.
 */
export function ingressError(reply: FastifyReply, code: ErrorCode, message: string, status?: number, source: 'ingress' | 'invocation' = 'ingress'): FastifyReply {
  const http = status ?? catalogue.get(code)!.status;
  const text = message.startsWith(`[${code}]`) ? message : `[${code}] ${message}`;
  return reply.code(http).header('x-restate-error-source', source).send({ code: http, message: text, restate_code: code });
}

/** Answers with the invocation's output, or its failure with the failure's code as status. */
export function respond(reply: FastifyReply, s: InvocationStatus, handler: OutputRules | undefined): FastifyReply {
  const result = s.result ?? { failure: { code: 500, message: 'the invocation has no result' } };
  void reply.header('x-restate-id', s.id);
  if (result.failure !== undefined) {
    const code = result.failure.code;
    const status = code >= 400 && code <= 599 ? code : 500;
    const body: Record<string, unknown> = { code, message: result.failure.message, source: 'invocation' };
    if (result.failure.metadata?.length) body.metadata = Object.fromEntries(result.failure.metadata.map((m) => [m.key, m.value]));
    return reply.code(status).header('x-restate-error-source', 'invocation').send(body);
  }
  const value = Buffer.from(result.value ?? '', 'base64');
  const contentType = handler?.output_content_type ?? 'application/json';
  if (value.length > 0 || handler?.output_set_content_type_if_empty) void reply.header('content-type', contentType);
  return reply.code(200).send(value);
}
