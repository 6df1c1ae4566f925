import http from 'node:http';
import http2 from 'node:http2';
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

const sessions = new Map<string, http2.ClientHttp2Session>();
const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

function session(origin: string): http2.ClientHttp2Session {
  const existing = sessions.get(origin);
  if (existing !== undefined && !existing.closed && !existing.destroyed) return existing;
  const s = http2.connect(origin, { peerMaxConcurrentStreams: 1000 });
  // An idle cached session must not keep the process alive.
  s.unref();
  s.on('error', () => sessions.delete(origin));
  s.on('close', () => {
    if (sessions.get(origin) === s) sessions.delete(origin);
  });
  s.on('goaway', () => {
    if (sessions.get(origin) === s) sessions.delete(origin);
  });
  sessions.set(origin, s);
  return s;
}

export function joinPath(uri: string, path: string): URL {
  const url = new URL(uri);
  url.pathname = url.pathname.replace(/\/+$/, '') + path;
  return url;
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

export function openStream(target: StreamTarget, handlers: StreamHandlers): InvocationStream {
  let stream: InvocationStream | undefined;
  const h = guarded(handlers, () => stream?.abort());
  stream = open(target, h);
  return stream;
}

function open(target: StreamTarget, h: StreamHandlers): InvocationStream {
  if (target.arn) return openLambda(target.arn, target, h);
  const url = joinPath(target.uri, target.path);
  return target.use_http_11 ? openHttp1(url, target.headers, h) : openHttp2(url, target.headers, h);
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
    abort() {
      done = true;
    },
  };
}

function openHttp2(url: URL, headers: Record<string, string>, h: StreamHandlers): InvocationStream {
  let done = false;
  const finish = (f: () => void) => {
    if (done) return;
    done = true;
    f();
  };
  let req: http2.ClientHttp2Stream;
  try {
    req = session(url.origin).request({ ':method': 'POST', ':path': url.pathname + url.search, ...headers }, { endStream: false });
  } catch (err) {
    setImmediate(() => finish(() => h.onError(err as Error)));
    return { write() {}, end() {}, abort() {} };
  }
  req.on('response', (hdrs) => h.onResponse(Number(hdrs[':status']), hdrs as Record<string, string>));
  req.on('data', (chunk: Buffer) => {
    if (!done) h.onData(chunk);
  });
  req.on('end', () => finish(() => h.onEnd()));
  req.on('error', (err) => finish(() => h.onError(err)));
  req.on('close', () => finish(() => h.onError(new Error(`stream closed (code ${req.rstCode})`))));
  return {
    write(bytes) {
      if (!req.writableEnded && !req.destroyed) req.write(bytes);
    },
    end() {
      if (!req.writableEnded && !req.destroyed) req.end();
    },
    abort() {
      done = true;
      if (!req.destroyed) req.close(http2.constants.NGHTTP2_CANCEL);
    },
  };
}

function openHttp1(url: URL, headers: Record<string, string>, h: StreamHandlers): InvocationStream {
  let done = false;
  const finish = (f: () => void) => {
    if (done) return;
    done = true;
    f();
  };
  const chunks: Buffer[] = [];
  let req: http.ClientRequest | undefined;
  return {
    write(bytes) {
      if (req === undefined) chunks.push(bytes);
    },
    end() {
      if (req !== undefined) return;
      const body = Buffer.concat(chunks);
      req = http.request(url, { method: 'POST', agent, headers: { ...headers, 'content-length': String(body.length) } }, (res) => {
        h.onResponse(res.statusCode ?? 0, res.headers);
        res.on('data', (chunk: Buffer) => {
          if (!done) h.onData(chunk);
        });
        res.on('end', () => finish(() => h.onEnd()));
        res.on('error', (err) => finish(() => h.onError(err)));
        res.on('aborted', () => finish(() => h.onError(new Error('response aborted'))));
      });
      req.on('error', (err) => finish(() => h.onError(err)));
      req.end(body);
    },
    abort() {
      done = true;
      req?.destroy();
    },
  };
}

export function closeAllSessions(): void {
  for (const s of sessions.values()) s.close();
  sessions.clear();
  agent.destroy();
  closeLambdaClients();
}
