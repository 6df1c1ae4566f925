// HTTP/2 in clear text ("h2c" with prior knowledge, RFC 9113 §3.3) beside HTTP/1.1 on one port, as
// Restate's ingress serves it. Node serves one or the other per server, so the port's server looks
// at a connection's first bytes: the HTTP/2 preface goes to an HTTP/2 server whose requests reach
// the same fastify handler, anything else to Node's HTTP/1.1 parser as before. The edge's limits
// hold for both: what Node's HTTP/2 layer does not check itself is checked per request (edge.ts).
import assert from 'node:assert/strict';
import http2, { type Http2Server, type Http2ServerRequest, type Http2ServerResponse, type Http2Session } from 'node:http2';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { HttpLimits } from '../config/index.js';
import type { Logger } from '../common/logger.js';
import { catalogue, type ErrorCode } from '../errors/index.js';

/** What the edge (edge.ts, which calls this) gives: its limits, and how its server shapes an error. */
export interface H2cOptions {
  limits: HttpLimits;
  logger: Logger;
  errors: { body(code: ErrorCode, message: string, status: number): unknown; headers?: Record<string, string> };
}

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/**
 * Streams one client may have open at once (the server's SETTINGS): Node's default is unlimited.
 * Go's HTTP/2 server allows 250, hyper (Restate's) 200.
 */
const MAX_CONCURRENT_STREAMS = 250;
/**
 * Node's own header limits sit this far above the configured ones, so a request just over them
 * reaches the check that answers 431 with its code (edge.ts). Past twice the count Node resets the
 * stream (ENHANCE_YOUR_CALM) before keeping the fields; the size is only advertised (Node 20 does
 * not hold a client to it), and a header block of megabytes ends the session in Node's HPACK
 * decoder (COMPRESSION_ERROR) — as HTTP/1.1 closes past its discard bound.
 */
const NODE_LIMIT_FACTOR = 2;
/** At most one log line per this period for sessions a client's protocol error ended: a flood must not flood the log. */
const SESSION_ERROR_LOG_PERIOD_MS = 10_000;
/** Pseudo-header fields of a request (:method, :scheme, :authority, :path): not counted as headers. */
const PSEUDO_HEADERS = 4;

/** Serves h2c with prior knowledge on `app`'s port beside HTTP/1.1. Call before the server listens. */
export function serveH2c(app: FastifyInstance, o: H2cOptions): void {
  const server = app.server as Server;
  const h2 = http2.createServer({
    maxHeaderListPairs: o.limits.max_header_count * NODE_LIMIT_FACTOR + PSEUDO_HEADERS,
    settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS, maxHeaderListSize: o.limits.max_header_size_bytes * NODE_LIMIT_FACTOR },
  });
  // The HTTP/1.1 server's own listeners (fastify's handler, the edge's bookkeeping) see every request.
  h2.on('request', (req: Http2ServerRequest, res: Http2ServerResponse) => {
    limitRequestTime(req, res, o);
    server.emit('request', req, res);
  });
  h2.on('checkExpectation', (req: Http2ServerRequest, res: Http2ServerResponse) => server.emit('checkExpectation', req, res));
  let closing = false;
  const sessions = trackSessions(h2, o.limits.idle_timeout_ms, o.logger, () => closing);
  const http1 = server.listeners('connection') as Array<(socket: Socket) => void>;
  assert.ok(http1.length > 0, 'the HTTP/1.1 server listens for connections');
  server.removeAllListeners('connection');
  // Connections whose first bytes are still awaited: at most http.max_connections.
  const sniffing = new Set<Socket>();
  const wait_ms = o.limits.header_timeout_ms > 0 ? o.limits.header_timeout_ms : o.limits.idle_timeout_ms;
  server.on('connection', (socket: Socket) => {
    sniffing.add(socket);
    socket.once('close', () => sniffing.delete(socket));
    sniff(socket, wait_ms, (isH2) => {
      sniffing.delete(socket);
      if (isH2) h2.emit('connection', socket);
      else for (const listener of http1) listener.call(server, socket);
    });
  });
  // Closing: GOAWAY to every session, now and to any that opens meanwhile; each ends once its streams
  // have (as idle HTTP/1.1 keep-alives close). A connection that has not sent its first bytes has no request to finish.
  app.addHook('preClose', (done) => {
    closing = true;
    for (const socket of sniffing) socket.destroy();
    for (const session of sessions) session.close();
    done();
  });
}

/**
 * Reads a connection's first bytes until they are or cannot be the HTTP/2 preface (at most its 24
 * bytes), puts them back, and hands the socket on. A client that sends nothing within `timeout_ms`
 * (the header timeout, else the idle timeout) goes to HTTP/1.1, whose own timeouts then close it.
 */
function sniff(socket: Socket, timeout_ms: number, handOver: (isH2: boolean) => void): void {
  let seen = Buffer.alloc(0);
  let decided = false;
  // Until a server has the socket, nobody else listens for its errors (a reset would be uncaught).
  const onError = (): void => {
    clearTimeout(timer);
    socket.destroy();
  };
  const decide = (isH2: boolean): void => {
    if (decided) return;
    decided = true;
    clearTimeout(timer);
    socket.off('error', onError);
    socket.off('readable', onReadable);
    if (seen.length > 0) socket.unshift(seen);
    handOver(isH2);
  };
  const onReadable = (): void => {
    for (let chunk: Buffer | null; (chunk = socket.read() as Buffer | null) !== null; ) seen = Buffer.concat([seen, chunk]);
    const n = Math.min(seen.length, PREFACE.length);
    const likeH2 = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
    if (!likeH2) decide(false);
    else if (seen.length >= PREFACE.length) decide(true);
  };
  const timer = timeout_ms > 0 ? setTimeout(() => decide(false), timeout_ms).unref() : undefined;
  socket.on('error', onError);
  socket.on('readable', onReadable);
  socket.once('close', () => clearTimeout(timer));
}

/**
 * The sessions open now. Each is closed once it has had no stream for `idle_ms`: a stream in flight
 * keeps its session however long the handler takes (as a call keeps its HTTP/1.1 connection), and
 * frames without a stream (PING, SETTINGS) do not keep an idle one open.
 */
function trackSessions(h2: Http2Server, idle_ms: number, logger: Logger, closing: () => boolean): Set<Http2Session> {
  const sessions = new Set<Http2Session>();
  const logSessionError = rateLimited(SESSION_ERROR_LOG_PERIOD_MS, (why: string, since: number) =>
    logger.warn({ err: why, sessions_ended: since }, 'http/2 sessions ended by a protocol error of the client'),
  );
  h2.on('session', (session: Http2Session) => {
    sessions.add(session);
    let streams = 0;
    let idle: NodeJS.Timeout | undefined;
    const idleFromNow = (): void => {
      if (idle_ms > 0) idle = setTimeout(() => streams === 0 && session.close(), idle_ms).unref();
    };
    session.on('stream', (stream) => {
      streams += 1;
      clearTimeout(idle);
      stream.once('close', () => {
        streams -= 1;
        if (streams === 0) idleFromNow();
      });
    });
    session.once('close', () => {
      clearTimeout(idle);
      sessions.delete(session);
    });
    // A session-level protocol error is the peer's (a header block past every limit, garbage after
    // the preface): the session ends, the server goes on.
    session.on('error', (err: Error & { code?: string }) => {
      session.destroy();
      // A reset or a vanished peer is routine; a frame Node's HTTP/2 layer refused is the client's fault.
      if (err.code?.startsWith('ERR_HTTP2') === true) logSessionError(err.code);
    });
    idleFromNow();
    if (closing()) session.close();
  });
  return sessions;
}

/** `f` at most once per `period_ms`, told how many calls it did not log since. */
function rateLimited(period_ms: number, f: (what: string, since: number) => void): (what: string) => void {
  let loggedAt_ms = 0;
  let since = 0;
  return (what) => {
    since += 1;
    if (Date.now() - loggedAt_ms < period_ms) return;
    f(what, since);
    loggedAt_ms = Date.now();
    since = 0;
  };
}

/** A request whose head or body is still arriving after `http.request_timeout` is answered 408, as HTTP/1.1's is. */
function limitRequestTime(req: Http2ServerRequest, res: Http2ServerResponse, o: H2cOptions): void {
  const limit_ms = o.limits.request_timeout_ms;
  if (limit_ms <= 0) return;
  const timer = setTimeout(() => {
    // The client's side is done (END_STREAM seen), whether or not a handler read the body.
    const state = req.stream.state.state;
    if (req.complete || state === http2.constants.NGHTTP2_STREAM_STATE_HALF_CLOSED_REMOTE || state === http2.constants.NGHTTP2_STREAM_STATE_CLOSED) return;
    const code: ErrorCode = 'KEEL0408';
    const entry = catalogue.get(code)!;
    const status = entry.status;
    o.logger[entry.log_level ?? 'warn']({ code, status }, 'http/2 request refused: it did not arrive in time');
    if (!res.headersSent) {
      const body = JSON.stringify(o.errors.body(code, `[${code}] the request was not received in time (http.request_timeout)`, status));
      res.writeHead(status, { ...o.errors.headers, 'content-type': 'application/json; charset=utf-8' });
      res.end(body);
    }
    res.stream.close(http2.constants.NGHTTP2_NO_ERROR);
  }, limit_ms);
  timer.unref();
  res.once('close', () => clearTimeout(timer));
}
