// The HTTP edge shared by the ingress and admin servers: limits on sizes, timeouts for slow and
// idle clients, a bound on connections, and coded answers where Node would otherwise reset the
// connection or answer in its own words. (The admin server imports it from here, a lower layer.)
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import http2, { type Http2ServerRequest } from 'node:http2';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import type { HttpLimits } from '../config/index.js';
import { catalogue, KeelError, type ErrorCode } from '../errors/index.js';
import type { Logger } from '../common/logger.js';
import { serveH2c } from './h2c.js';

/** Request target (path and query) in bytes: longer is 414. Keys and names live in it. */
export const MAX_URL_BYTES = 8 * 1024;
/** Node checks header and request timeouts on this period: a slow client is cut within it. */
const TIMEOUT_CHECK_INTERVAL_MS = 1_000;
/** A connection answered with an error gets this long to read the answer before it is closed. */
const CLOSE_GRACE_MS = 1_000;
/**
 * How long a head that overflowed mid-line waits for the chunk that ends the line (414 or 431).
 * A client sends the rest of its line at once; the margin is for a loaded machine, where the
 * pieces of a 100 KB line read 5 ms apart took ~180 ms from the overflow to the line's end.
 */
const OVERFLOW_DECISION_WAIT_MS = 1_000;
/** At most one log line per this period for refused connections. */
const LOG_PERIOD_MS = 10_000;
/** TCP keep-alive probes find a vanished peer (half-open connection) during long calls. */
const TCP_KEEPALIVE_DELAY_MS = 30_000;
/** The rest of an oversized body read and discarded after its 413, at most (then the connection closes). */
const DISCARD_MAX_BYTES = 64 * 1024 * 1024;
const DISCARD_MAX_MS = 30_000;

/** How a server shapes its error bodies (the ingress and the admin API differ). */
/**
 * Where a request goes whose handler needs a partition another node of a cluster leads (it threw
 * NotLedHereError before it changed anything). Set once the cluster node exists; unset on a
 * single node, where the error is answered as any other.
 */
export interface PartitionRouting {
  elsewhere?: (partition: number, req: FastifyRequest, reply: FastifyReply) => Promise<void>;
  /** A call accepted here whose partition moved while its client waited: its result comes from the new leader (attach). */
  attach?: (partition: number, invocation: string, req: FastifyRequest, reply: FastifyReply) => Promise<void>;
}

export interface EdgeErrors {
  body(code: ErrorCode, message: string, status: number): unknown;
  headers?: Record<string, string>;
  /** The code of a request that cannot be parsed (a malformed path, bad framing). */
  badRequest: ErrorCode;
}

export interface EdgeOptions {
  limits: HttpLimits;
  errors: EdgeErrors;
  logger: Logger;
}

/** Fastify options for a hardened server; merge them into the server's own. */
export function edgeServerOptions(o: EdgeOptions): Partial<FastifyServerOptions> {
  const { limits } = o;
  return {
    // Route parameters (keys, names, ids) may be as long as the URL allows: 414 is decided here.
    routerOptions: { maxParamLength: MAX_URL_BYTES },
    requestTimeout: limits.request_timeout_ms,
    keepAliveTimeout: Math.max(1, limits.idle_timeout_ms),
    // Node's own socket timeout stays off: idleness is judged per connection below.
    connectionTimeout: 0,
    http: {
      maxHeaderSize: limits.max_header_size_bytes,
      connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
      keepAlive: true,
      keepAliveInitialDelay: TCP_KEEPALIVE_DELAY_MS,
    },
    clientErrorHandler: clientErrorHandler(o),
    // A path fastify cannot decode (`%ZZ`) is the client's mistake, answered in the server's shape.
    frameworkErrors: (err: FastifyError, _req: FastifyRequest, reply: FastifyReply) => {
      const [code, status, why]: [ErrorCode, number, string] =
        err.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? ['KEEL0414', 414, `a path segment is longer than ${MAX_URL_BYTES} bytes`]
          : [o.errors.badRequest, 400, 'the request path is not valid percent-encoded UTF-8'];
      o.logger.warn({ code, err: err.message.slice(0, 200) }, 'http request refused before routing');
      void reply.code(status).headers({ ...o.errors.headers }).send(o.errors.body(code, `[${code}] ${why}`, status));
    },
  } as unknown as Partial<FastifyServerOptions>;
}

/** What a server still needs once fastify made it: limits on the node server and the URL and header checks. */
export function hardenServer(app: FastifyInstance, o: EdgeOptions): void {
  const server = app.server as Server;
  const { limits } = o;
  serveH2c(app, o);
  // Node 20 keeps collecting up to this many headers and silently drops the rest (a body would
  // then lose its content-type): one more than the limit is enough to see it was exceeded. Newer
  // Node refuses the request in the parser instead (clientErrorHandler answers 431).
  server.maxHeadersCount = limits.max_header_count + 1;
  server.maxConnections = limits.max_connections;
  server.headersTimeout = limits.request_timeout_ms > 0 ? Math.min(limits.header_timeout_ms, limits.request_timeout_ms) : limits.header_timeout_ms;
  if (limits.idle_timeout_ms > 0) closeIdleConnections(server, limits.idle_timeout_ms);
  drainOnClose(app, server);
  logDrops(server, o.logger, limits.max_connections);
  answerExpectations(server, o);
  app.addHook('onRequest', async (req, reply) => {
    if (req.url.length > MAX_URL_BYTES) return refuse(reply, o, 'KEEL0414', `the request target is ${req.url.length} bytes long, more than ${MAX_URL_BYTES}`);
    const h2 = req.raw.httpVersionMajor === 2;
    // HTTP/2's pseudo-header fields (:method, :path…) stand for HTTP/1.1's request line: not counted.
    const fields = h2 ? h2FieldCount(req.raw.rawHeaders) : req.raw.rawHeaders.length / 2;
    if (fields > limits.max_header_count) return refuse(reply, o, 'KEEL0431', `the request has more than ${limits.max_header_count} header fields (http.max_header_count)`);
    // HTTP/1.1's parser enforces the size itself (clientErrorHandler answers); HTTP/2's does not.
    if (h2 && headerBytes(req.raw.rawHeaders) > limits.max_header_size_bytes) return refuse(reply, o, 'KEEL0431', `the request header section is larger than ${limits.max_header_size_bytes} bytes (http.max_header_size)`);
    return undefined;
  });
}

/** Header fields of an HTTP/2 request, its pseudo-header fields (:method, :path…) not counted. */
function h2FieldCount(raw: string[]): number {
  let fields = 0;
  for (let i = 0; i < raw.length; i += 2) if (!raw[i]!.startsWith(':')) fields += 1;
  return fields;
}

/** A header section's size as HTTP/1.1 counts it: each field's name, value, ': ' and line end. */
function headerBytes(raw: string[]): number {
  let bytes = 0;
  for (let i = 0; i + 1 < raw.length; i += 2) bytes += raw[i]!.length + raw[i + 1]!.length + 4;
  return bytes;
}

/**
 * A body over the limit is answered (413) before it has arrived. Fastify marks the answer
 * `connection: close` and Node then closes the socket as soon as the answer is out, while the
 * client may still be sending: a client that writes its whole body before it reads (most do)
 * gets EPIPE or a reset and never reads the answer. So the connection stays open and Node reads
 * and discards the rest of the body (its `_dump` of an unread request), up to DISCARD_MAX_BYTES
 * and DISCARD_MAX_MS; past either the socket is closed. Called before the answer is sent.
 */
export function discardOversizedBody(req: FastifyRequest, reply: FastifyReply): void {
  const raw = req.raw;
  // Neither version has a `connection` field left to send: HTTP/2 has none (Node warns and drops it).
  reply.removeHeader('connection');
  if (raw.httpVersionMajor === 2) {
    // The stream is closed past the bounds (RST_STREAM NO_ERROR after the answer, RFC 9113 §8.1);
    // closing at once would leave a client that wrote its whole body waiting for flow control.
    const stream = (raw as unknown as Http2ServerRequest).stream;
    if (!raw.complete && !stream.destroyed) discardBounded(stream, () => stream.destroyed || stream.close(http2.constants.NGHTTP2_NO_ERROR));
    return;
  }
  if (raw.complete || raw.httpVersionMajor !== 1) return;
  discardBounded(raw.socket, () => raw.complete || raw.socket.destroy(), raw);
}

/**
 * Counts what `source` still delivers (Node reads and drops it) until `ended` ends (the request)
 * or `source` closes; past DISCARD_MAX_BYTES or DISCARD_MAX_MS, `cut`.
 */
function discardBounded(source: NodeJS.EventEmitter, cut: () => unknown, ended: NodeJS.EventEmitter = source): void {
  let seen_bytes = 0;
  const stop = (): void => {
    clearTimeout(timer);
    source.off('data', count);
  };
  const count = (chunk: Buffer): void => {
    seen_bytes += chunk.length;
    if (seen_bytes <= DISCARD_MAX_BYTES) return;
    stop();
    cut();
  };
  const timer = setTimeout(() => {
    stop();
    cut();
  }, DISCARD_MAX_MS);
  timer.unref();
  source.on('data', count);
  ended.once('end', stop);
  source.once('close', stop);
}

/** Node answers an unknown `Expect` with a bare 417 of its own; this one carries the code. */
function answerExpectations(server: Server, o: EdgeOptions): void {
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const code: ErrorCode = 'KEEL0417';
    const expect = String(req.headers.expect).slice(0, 100);
    o.logger.warn({ code, expect }, 'http request refused before routing');
    const body = JSON.stringify(o.errors.body(code, `[${code}] the Expect header ${JSON.stringify(expect)} is not supported; only "100-continue" is`, 417));
    res.writeHead(417, { ...o.errors.headers, ...closeHeader(req.httpVersionMajor), 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
}

/** Connections refused over the limit, logged at most once per period: a flood must not flood the log. */
function logDrops(server: Server, logger: Logger, limit: number): void {
  let dropped = 0;
  let loggedAt_ms = 0;
  server.on('drop', () => {
    dropped += 1;
    const now_ms = Date.now();
    if (now_ms - loggedAt_ms < LOG_PERIOD_MS) return;
    logger.warn({ limit, dropped }, 'connections refused: http.max_connections reached');
    dropped = 0;
    loggedAt_ms = now_ms;
  });
}

/** `connection: close` where there is such a field (HTTP/1.x): an HTTP/2 stream ends alone. */
function closeHeader(httpVersionMajor: number): Record<string, string> {
  return httpVersionMajor === 2 ? {} : { connection: 'close' };
}

function refuse(reply: FastifyReply, o: EdgeOptions, code: ErrorCode, message: string): FastifyReply {
  const { errors } = o;
  const entry = catalogue.get(code)!;
  const status = entry.status;
  o.logger[entry.log_level ?? 'warn']({ code, status, http: reply.request.raw.httpVersion, err: message }, 'http request refused before routing');
  return reply.code(status).headers({ ...errors.headers, ...closeHeader(reply.request.raw.httpVersionMajor) }).send(errors.body(code, `[${code}] ${message}`, status));
}

/**
 * Closes a connection that has no request in flight after `idle_ms` without a byte: one that
 * connects and sends nothing, or stays open between requests. A request in flight (a call that
 * waits an hour for its handler) keeps its connection whatever the silence.
 */
const DRAIN_SWEEP_MS = 50;

function closeIdleConnections(server: Server, idle_ms: number): void {
  const inFlight = new WeakMap<Socket, number>();
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    inFlight.set(socket, (inFlight.get(socket) ?? 0) + 1);
    res.once('close', () => inFlight.set(socket, (inFlight.get(socket) ?? 1) - 1));
  });
  // With a listener here Node leaves the decision to us (it destroys the socket otherwise).
  server.setTimeout(idle_ms, (socket: Socket) => {
    if ((inFlight.get(socket) ?? 0) === 0) socket.destroy();
  });
}

/**
 * Closing, the server closes each keep-alive connection as soon as it has no request in flight.
 * Node closes those idle at the moment of `close()` only: one busy then (a client that retries
 * at once, a node of a cluster forwarding) stayed open until its idle timeout, and the shutdown
 * — a cluster node's handover included — waited that long (60 s measured).
 */
function drainOnClose(app: FastifyInstance, server: Server): void {
  app.addHook('preClose', (done) => {
    const sweep = setInterval(() => server.closeIdleConnections(), DRAIN_SWEEP_MS);
    server.once('close', () => clearInterval(sweep));
    done();
  });
}

/** Coded answers to what Node cannot parse or did not receive in time, instead of a reset. */
type ParserError = Error & { code?: string; rawPacket?: unknown };

function clientErrorHandler(o: EdgeOptions): (error: Error, socket: Socket) => void {
  const answered = new WeakSet<Socket>();
  const undecided = new WeakSet<Socket>();
  const answer = (socket: Socket, err: ParserError, [code, why]: [ErrorCode, string]): void => {
    if (socket.destroyed || answered.has(socket)) return;
    answered.add(socket);
    const entry = catalogue.get(code)!;
    const status = entry.status;
    // A silent or slow connection is routine (and plentiful under a slowloris): its code logs lower.
    o.logger[entry.log_level ?? 'warn']({ code, status, err: err.message, parser: err.code }, 'http request refused before routing');
    const body = JSON.stringify(o.errors.body(code, `[${code}] ${why}`, status));
    const extra = Object.entries(o.errors.headers ?? {}).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    if (socket.writable) {
      socket.end(
        `HTTP/1.1 ${status} ${statusText(status)}\r\nconnection: close\r\ncontent-type: application/json; charset=utf-8\r\n${extra}` +
          `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
    }
    // Closing at once would reset a client still sending: it would never read the answer.
    setTimeout(() => socket.destroy(), CLOSE_GRACE_MS).unref();
  };
  return (error, socket) => {
    const err = error as ParserError;
    // The parser reports every further chunk of a refused request: answer once.
    if (err.code === 'ECONNRESET' || socket.destroyed || answered.has(socket)) return;
    const decided = classify(err, o.errors.badRequest);
    if (decided !== undefined) return answer(socket, err, decided);
    // The chunk that overflowed is the middle of a long line: a later chunk, where that line ends,
    // tells a long request target (414) from a long header (431). One that never comes is a 431,
    // also when the client ends its side first: before Node ends ours (prepended), or the answer
    // could not be written.
    if (undecided.has(socket)) return;
    undecided.add(socket);
    const timer = setTimeout(() => answer(socket, err, HEAD_TOO_LARGE), OVERFLOW_DECISION_WAIT_MS).unref();
    socket.prependOnceListener('end', () => {
      clearTimeout(timer);
      answer(socket, err, HEAD_TOO_LARGE);
    });
  };
}

const HEAD_TOO_LARGE: [ErrorCode, string] = ['KEEL0431', 'the request header section is larger than http.max_header_size or has more fields than http.max_header_count'];

/** The answer to a parser error, or undefined while the chunks seen cannot tell 414 from 431. */
function classify(err: ParserError, badRequest: ErrorCode): [ErrorCode, string] | undefined {
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return ['KEEL0408', 'the request was not received in time (http.header_timeout / http.request_timeout)'];
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    const part = overflowedPart(Buffer.isBuffer(err.rawPacket) ? err.rawPacket : undefined);
    if (part === undefined) return undefined;
    return part === 'request line' ? ['KEEL0414', `the request target is longer than ${MAX_URL_BYTES} bytes`] : HEAD_TOO_LARGE;
  }
  return [badRequest, `the request cannot be parsed as HTTP/1.1 (${err.code ?? err.message})`];
}

/**
 * Which part of the head a chunk of an overflowed request belongs to, read from its first line:
 * one that starts the request line (a method then a space), or that ends it (` HTTP/1.x` before
 * the first line break and no `name:`). Undefined for a chunk with no line break that does not
 * start a request: the middle of a long target and of a long header value look alike.
 */
function overflowedPart(chunk: Buffer | undefined): 'request line' | 'headers' | undefined {
  if (chunk === undefined) return undefined;
  const text = chunk.subarray(0, Math.min(chunk.length, MAX_URL_BYTES * 16)).toString('latin1');
  const eol = text.indexOf('\r\n');
  const line = eol < 0 ? text : text.slice(0, eol);
  if (/^[A-Z]+ \S/.test(line)) return line.length > MAX_URL_BYTES || eol < 0 ? 'request line' : 'headers';
  if (eol < 0) return undefined;
  return / HTTP\/1\.[01]$/.test(line) && !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+:/.test(line) ? 'request line' : 'headers';
}

function statusText(status: number): string {
  return { 400: 'Bad Request', 408: 'Request Timeout', 414: 'URI Too Long', 431: 'Request Header Fields Too Large' }[status] ?? 'Error';
}

/** A route-schema violation, named by field, as KEEL0001 (the body as a whole) or KEEL0002 (a field). */
export function schemaError(err: FastifyError): KeelError {
  const first = err.validation?.[0];
  const where = err.validationContext ?? 'body';
  if (first === undefined) return new KeelError('KEEL0001', err.message);
  const missing = (first.params as { missingProperty?: string } | undefined)?.missingProperty;
  const path = first.instancePath.replace(/^\//, '').replaceAll('/', '.');
  const field = missing !== undefined ? (path === '' ? missing : `${path}.${missing}`) : path;
  if (field === '' && where === 'body') return new KeelError('KEEL0001', `the request body ${first.message ?? 'is not valid'}`);
  const allowed = (first.params as { allowedValues?: unknown[] } | undefined)?.allowedValues;
  const what = missing !== undefined ? 'is required' : allowed !== undefined ? `must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}` : (first.message ?? 'is not valid');
  const kind = where === 'body' ? 'field' : where === 'params' ? 'path parameter' : where === 'headers' ? 'header' : 'query parameter';
  return new KeelError('KEEL0002', `the ${kind} ${field} ${what}`);
}
