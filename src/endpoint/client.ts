import http from 'node:http';
import http2 from 'node:http2';
import type { Socket } from 'node:net';
import { DEFAULT_HTTP2_POOL_OPTIONS, Http2Pool, type Http2PoolOptions, type PooledStream } from './http2-pool.js';
import type { Config } from '../config/index.js';
import type { RequestSigner } from './identity.js';
import { closeLambdaClients, invokeLambda, LambdaApiError, LambdaFunctionError } from './lambda.js';

/** What an attempt hears from its HTTP exchange with the endpoint. */
export interface StreamHandlers {
  onResponse(status: number, headers: Record<string, string | string[] | undefined>): void;
  onData(chunk: Buffer): void;
  /** The response ended cleanly. */
  onEnd(): void;
  /** The exchange broke: connection refused, reset, aborted. */
  onError(err: Error): void;
}

/** One invocation stream: bidirectional over HTTP/2, or request-response over either version. */
export interface InvocationStream {
  write(bytes: Buffer): void;
  /** Ends the request body (in bidirectional mode: asks the SDK to suspend). */
  end(): void;
  /**
   * The exchange is over for us: our side is ended normally and whatever else the endpoint
   * sends is discarded. Never a reset, so a finished stream costs the endpoint nothing.
   */
  finish(): void;
  /** Stops the exchange now (kill, timeout, protocol violation): a reset, within the connection's budget. */
  abort(): void;
}

export interface StreamTarget {
  /** Base URI of the deployment; `/invoke/{service}/{handler}` is appended to its path. */
  uri: string;
  /**
   * Function-platform deployment: the qualified Lambda ARN. When set, the exchange is one
   * Lambda Invoke in request-response mode and `uri`/`use_http_11` are ignored.
   */
  arn?: string;
  /** Role assumed to invoke the function (STS AssumeRole). */
  assume_role_arn?: string;
  use_http_11: boolean;
  path: string;
  headers: Record<string, string>;
}

export interface EndpointClientOptions {
  http2: Http2PoolOptions;
  /** HTTP/1.1 sockets per endpoint origin. */
  http1_max_sockets_per_origin: number;
  /** Signs every request (request identity v1); unset: requests go unsigned. */
  signer?: RequestSigner;
}

export const DEFAULT_ENDPOINT_CLIENT_OPTIONS: EndpointClientOptions = {
  http2: DEFAULT_HTTP2_POOL_OPTIONS,
  http1_max_sockets_per_origin: 128,
};

/** The endpoint client as configured (the connect timeout, the request identity key when there is one). */
export function endpointClientFor(config: Config, signer: RequestSigner | undefined): EndpointClient {
  return new EndpointClient({
    ...DEFAULT_ENDPOINT_CLIENT_OPTIONS,
    http2: { ...DEFAULT_ENDPOINT_CLIENT_OPTIONS.http2, connect_timeout_ms: config.worker.invoker.connect_timeout_ms },
    ...(signer !== undefined ? { signer } : {}),
  });
}

/** How long a finished stream may take to end the endpoint's side before it is reset. */
const FINISH_GRACE_MS = 5_000;
/** Request URLs kept (deployments × handlers); past it they are made anew. */
const MAX_CACHED_URLS = 4_096;
/** A refused stream (never processed by the endpoint) is sent again this many times at most. */
const MAX_RESENDS = 8;
/** Request bodies go to the session in pieces of this size, each once the previous one is taken. */
const WRITE_CHUNK_BYTES = 256 * 1024;

/**
 * The one client for service endpoints: pooled HTTP/2 connections, keep-alive HTTP/1.1 sockets,
 * and function-platform (Lambda) invokes.
 */
export class EndpointClient {
  private readonly pool: Http2Pool;
  private readonly agent: http.Agent;
  private readonly signer: RequestSigner | undefined;
  private readonly connect_timeout_ms: number;
  /** Request URLs by deployment and handler: every attempt used to parse its deployment's URI. */
  private readonly urls = new Map<string, URL>();

  constructor(options: EndpointClientOptions = DEFAULT_ENDPOINT_CLIENT_OPTIONS) {
    this.pool = new Http2Pool(options.http2);
    this.agent = keepAliveAgent(options);
    this.signer = options.signer;
    this.connect_timeout_ms = options.http2.connect_timeout_ms;
  }

  openStream(target: StreamTarget, handlers: StreamHandlers): InvocationStream {
    let stream: InvocationStream | undefined;
    const h = guarded(handlers, () => stream?.abort());
    stream = this.open(target, h);
    return stream;
  }

  /** HTTP/2 connections open to an origin (for tests and introspection). */
  http2Connections(origin: string): number {
    return this.pool.connections(origin);
  }

  /** Pooled HTTP/2 connections and their streams, for the metrics. */
  http2Stats(): { connections: number; streams: number } {
    return this.pool.stats();
  }

  close(): void {
    this.pool.close();
    this.agent.destroy();
    closeLambdaClients();
  }

  private open(target: StreamTarget, h: StreamHandlers): InvocationStream {
    if (target.arn) return openLambda(target.arn, { ...target, headers: this.signed(target.headers, target.path) }, h);
    const url = this.url(target.uri, target.path);
    const headers = this.signed(target.headers, url.pathname);
    return target.use_http_11 ? openHttp1(this.agent, url, headers, this.connect_timeout_ms, h) : openHttp2(this.pool, url, headers, h);
  }

  /** `joinPath(uri, path)`, made once per pair (the URLs are only read, never changed). */
  private url(uri: string, path: string): URL {
    const key = `${uri}\n${path}`;
    let url = this.urls.get(key);
    if (url === undefined) {
      if (this.urls.size >= MAX_CACHED_URLS) this.urls.clear();
      url = joinPath(uri, path);
      this.urls.set(key, url);
    }
    return url;
  }

  /** The request identity goes last: no additional header may replace it. */
  private signed(headers: Record<string, string>, path: string): Record<string, string> {
    return this.signer === undefined ? headers : { ...headers, ...this.signer.headers(path) };
  }
}

export function joinPath(uri: string, path: string): URL {
  const url = new URL(uri);
  url.pathname = url.pathname.replace(/\/+$/, '') + path;
  return url;
}

/**
 * Keep-alive sockets for HTTP/1.1 endpoints, bounded per origin; a socket left free for the
 * idle timeout is closed (an in-use one never is: a request may legitimately take minutes).
 */
function keepAliveAgent(options: EndpointClientOptions): http.Agent {
  const agent = new http.Agent({
    keepAlive: true,
    maxSockets: options.http1_max_sockets_per_origin,
    maxFreeSockets: options.http1_max_sockets_per_origin,
    scheduling: 'lifo',
  });
  const idle_ms = options.http2.idle_timeout_ms;
  if (idle_ms > 0) {
    agent.on('free', (socket: Socket) => socket.setTimeout(idle_ms));
  }
  return agent;
}

/**
 * Safety net: a handler that throws (say, on a message it cannot decode) must not take the
 * process down from inside a socket callback. The exchange is aborted and reported as broken.
 */
function guarded(h: StreamHandlers, abort: () => void): StreamHandlers {
  let broken = false;
  const wrap =
    <A extends unknown[]>(f: (...a: A) => void) =>
    (...a: A) => {
      if (broken) return;
      try {
        f(...a);
      } catch (err) {
        broken = true;
        abort();
        try {
          h.onError(new Error(`cannot handle the endpoint's answer: ${(err as Error)?.message ?? String(err)}`, { cause: err }));
        } catch {
          /* nothing more to do */
        }
      }
    };
  return { onResponse: wrap(h.onResponse), onData: wrap(h.onData), onEnd: wrap(h.onEnd), onError: wrap(h.onError) };
}

/**
 * Request-response over a function platform: the request body is buffered until `end()`, sent in
 * one Lambda Invoke, and the function's whole answer is delivered as response, data, end.
 */
function openLambda(arn: string, target: StreamTarget, h: StreamHandlers): InvocationStream {
  let done = false;
  let sent = false;
  const chunks: Buffer[] = [];
  return {
    write(bytes) {
      if (!sent) chunks.push(bytes);
    },
    end() {
      if (sent || done) return;
      sent = true;
      invokeLambda({
        arn,
        assume_role_arn: target.assume_role_arn,
        method: 'POST',
        path: target.path,
        headers: target.headers,
        body: Buffer.concat(chunks),
      }).then(
        (r) => {
          if (done) return;
          h.onResponse(r.status, r.headers);
          if (done) return;
          if (r.body.length > 0) h.onData(r.body);
          if (done) return;
          done = true;
          h.onEnd();
        },
        (err: unknown) => {
          if (done) return;
          if (err instanceof LambdaApiError && (err.httpStatus === 413 || err.errorName === 'RequestTooLargeException')) {
            // The platform's payload limit: the attempt reports it as RT0019.
            h.onResponse(413, { 'x-amzn-errortype': err.errorName });
          } else if (err instanceof LambdaFunctionError) {
            h.onResponse(500, { 'x-amz-function-error': err.kind });
            if (!done) h.onData(Buffer.from(err.message));
          } else {
            done = true;
            h.onError(err instanceof Error ? err : new Error(String(err)));
            return;
          }
          if (!done) {
            done = true;
            h.onEnd();
          }
        },
      );
    },
    finish() {
      done = true;
    },
    abort() {
      done = true;
    },
  };
}

/**
 * Whether the endpoint never processed a stream, so sending it again elsewhere is not a retry:
 * it was refused (REFUSED_STREAM), turned away for lack of memory (ENHANCE_YOUR_CALM), or lies
 * above the last stream id of the GOAWAY that closed its connection.
 */
function neverProcessed(p: PooledStream): boolean {
  const { stream, connection } = p;
  const code = stream.rstCode;
  if (code === http2.constants.NGHTTP2_REFUSED_STREAM || code === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM) return true;
  if (!Number.isFinite(connection.last_processed_stream_id)) return false;
  return stream.id === undefined || stream.id > connection.last_processed_stream_id;
}

function openHttp2(pool: Http2Pool, url: URL, headers: Record<string, string>, h: StreamHandlers): InvocationStream {
  return new Http2InvocationStream(pool, url, headers, h);
}

/**
 * A bidirectional stream over a pooled HTTP/2 connection. Until the endpoint answers, the bytes
 * sent are kept: a stream the endpoint never processed is sent again at once on another
 * connection, which is not a failure of the attempt.
 */
class Http2InvocationStream implements InvocationStream {
  private readonly requestHeaders: Record<string, string>;
  /** The handlers heard their last event (end or error), or Keel finished or aborted the stream. */
  private done = false;
  private responded = false;
  /** Our side is ended (the request body is complete). */
  private ended = false;
  /** finish() or abort() ran: the pooled stream is let go. */
  private released = false;
  private resends = 0;
  /** Everything written so far, while a resend is still possible. */
  private readonly sent: Buffer[] = [];
  private current: PooledStream | undefined;
  private writer!: ChunkedWriter;

  constructor(
    private readonly pool: Http2Pool,
    private readonly url: URL,
    headers: Record<string, string>,
    private readonly h: StreamHandlers,
  ) {
    this.requestHeaders = { ':method': 'POST', ':path': url.pathname + url.search, ...headers };
    this.attach();
  }

  write(bytes: Buffer): void {
    if (this.done || this.ended) return;
    if (!this.responded) this.sent.push(bytes);
    this.writer.write(bytes);
  }

  end(): void {
    if (this.done) return;
    this.endOurSide();
  }

  private endOurSide(): void {
    if (this.ended) return;
    this.ended = true;
    this.writer.end();
  }

  finish(): void {
    this.done = true;
    if (this.released) return;
    this.released = true;
    this.endOurSide();
    const p = this.current;
    if (p === undefined || p.stream.closed) return;
    // Read (and drop) the rest of the answer so the stream ends on both sides.
    p.stream.resume();
    const grace = setTimeout(() => {
      if (!p.stream.closed) resetStream(p);
    }, FINISH_GRACE_MS);
    grace.unref();
    p.stream.once('close', () => clearTimeout(grace));
  }

  abort(): void {
    this.done = true;
    if (this.released) return;
    this.released = true;
    const p = this.current;
    if (p === undefined || p.stream.closed) return;
    if (p.connection.takeResetToken()) resetStream(p);
    else {
      // Over the reset budget: end gracefully and ignore the answer.
      this.endOurSide();
      p.stream.resume();
    }
  }

  private finishWith(f: () => void): void {
    if (this.done) return;
    this.done = true;
    f();
  }

  private attach(): void {
    let p: PooledStream;
    try {
      p = this.pool.request(this.url.origin, this.requestHeaders);
    } catch (err) {
      setImmediate(() => this.finishWith(() => this.h.onError(err as Error)));
      this.writer = new ChunkedWriter(undefined);
      return;
    }
    this.current = p;
    this.writer = new ChunkedWriter(p.stream);
    let failure: Error | undefined;
    p.stream.on('response', (hdrs) => {
      if (this.done) return;
      this.responded = true;
      this.sent.length = 0;
      this.h.onResponse(Number(hdrs[':status']), hdrs as Record<string, string>);
    });
    p.stream.on('data', (chunk: Buffer) => {
      if (!this.done) this.h.onData(chunk);
    });
    p.stream.on('end', () => this.finishWith(() => this.h.onEnd()));
    p.stream.on('error', (err) => (failure = err));
    p.stream.on('close', () => this.closed(p, failure));
  }

  /** The pooled stream closed: sent again elsewhere when the endpoint never processed it, else the attempt hears why. */
  private closed(p: PooledStream, failure: Error | undefined): void {
    if (this.done || this.current !== p) return;
    if (!this.responded && this.resends < MAX_RESENDS && neverProcessed(p)) {
      // The connection is unfit for new streams (going away, or out of memory): leave it.
      p.connection.drain();
      this.resends += 1;
      this.attach();
      for (const b of this.sent) this.writer.write(b);
      if (this.ended) this.writer.end();
      return;
    }
    this.finishWith(() => this.h.onError(failure ?? new Error(`stream closed (code ${p.stream.rstCode})`)));
  }
}

/** Destroys a socket still connecting after `timeout_ms`: an unreachable host fails fast. */
export function boundConnect(socket: Socket, timeout_ms: number): void {
  const timer = setTimeout(() => socket.destroy(new Error(`could not connect within ${timeout_ms} ms`)), timeout_ms);
  timer.unref();
  const clear = () => clearTimeout(timer);
  socket.once('connect', clear);
  socket.once('close', clear);
}

function resetStream(p: PooledStream): void {
  if (!p.stream.destroyed) p.stream.close(http2.constants.NGHTTP2_CANCEL);
}

/**
 * Node counts every byte queued on a session towards its memory limit and refuses all new
 * streams of that session while over it: one 20 MB write would stall every other invocation on
 * the connection. Bodies are therefore handed over in chunks, the next once the previous is taken.
 */
class ChunkedWriter {
  private readonly queue: Buffer[] = [];
  private waiting = false;
  private endRequested = false;

  constructor(private readonly stream: http2.ClientHttp2Stream | undefined) {}

  write(bytes: Buffer): void {
    for (let at = 0; at < bytes.length; at += WRITE_CHUNK_BYTES) {
      this.queue.push(at === 0 && bytes.length <= WRITE_CHUNK_BYTES ? bytes : bytes.subarray(at, at + WRITE_CHUNK_BYTES));
    }
    this.pump();
  }

  end(): void {
    this.endRequested = true;
    this.pump();
  }

  private pump(): void {
    const s = this.stream;
    if (s === undefined || this.waiting) return;
    while (this.queue.length > 0) {
      if (s.writableEnded || s.destroyed) {
        this.queue.length = 0;
        return;
      }
      const more = s.write(this.queue.shift()!);
      if (!more) {
        this.waiting = true;
        s.once('drain', () => {
          this.waiting = false;
          this.pump();
        });
        return;
      }
    }
    if (this.endRequested && !s.writableEnded && !s.destroyed) s.end();
  }
}

/** Request-response over HTTP/1.1: the body is sent at `end()`, on a keep-alive socket. */
function openHttp1(agent: http.Agent, url: URL, headers: Record<string, string>, connect_timeout_ms: number, h: StreamHandlers): InvocationStream {
  let done = false;
  const finishWith = (f: () => void) => {
    if (done) return;
    done = true;
    f();
  };
  const chunks: Buffer[] = [];
  let req: http.ClientRequest | undefined;
  let res: http.IncomingMessage | undefined;
  return {
    write(bytes) {
      if (req === undefined) chunks.push(bytes);
    },
    end() {
      if (req !== undefined) return;
      const body = Buffer.concat(chunks);
      chunks.length = 0;
      req = http.request(url, { method: 'POST', agent, headers: { ...headers, 'content-length': String(body.length) } }, (r) => {
        res = r;
        if (done) {
          r.resume();
          return;
        }
        h.onResponse(r.statusCode ?? 0, r.headers);
        r.on('data', (chunk: Buffer) => {
          if (!done) h.onData(chunk);
        });
        r.on('end', () => finishWith(() => h.onEnd()));
        r.on('error', (err) => finishWith(() => h.onError(err)));
        r.on('aborted', () => finishWith(() => h.onError(new Error('response aborted'))));
      });
      req.on('socket', (socket) => {
        // An in-use socket never idles out (the agent's idle timeout is for free sockets only)…
        socket.setTimeout(0);
        // … but one that cannot connect gives up after the connect timeout.
        if (socket.connecting) boundConnect(socket, connect_timeout_ms);
      });
      req.on('error', (err) => finishWith(() => h.onError(err)));
      req.end(body);
    },
    finish() {
      // The rest of the answer is read and dropped, so the socket goes back to the pool.
      done = true;
      res?.resume();
    },
    abort() {
      done = true;
      req?.destroy();
    },
  };
}
