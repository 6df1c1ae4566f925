// One-shot requests to an endpoint (discovery): HTTP/2 with prior knowledge, HTTP/1.1, or a
// Lambda invoke. Failures are classified for the caller, which owns the error codes.
import http from 'node:http';
import https from 'node:https';
import http2 from 'node:http2';
import { boundConnect } from './client.js';
import type { RequestSigner } from './identity.js';
import { invokeLambda, LambdaApiError, LambdaFunctionError } from './lambda.js';

export interface FetchResponse {
  status: number;
  headers: Record<string, string | undefined>;
  body: Buffer;
}

export type FetchFailure =
  /** Nothing answered, the connection broke, or the answer did not come in time. */
  | 'unreachable'
  /** Something listened but never spoke HTTP/2: likely an HTTP/1.1-only server. */
  | 'http1-only'
  /** The request could not even be sent (a header value the protocol forbids, say). */
  | 'invalid-request'
  /** The answer was larger than the limit. */
  | 'too-large'
  /** The function platform refused or the function failed. */
  | 'function-error';

export class FetchError extends Error {
  constructor(
    readonly failure: FetchFailure,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'FetchError';
  }
}

export interface FetchRequest {
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  timeout_ms: number;
  /** Answers larger than this fail with `too-large`. */
  max_body_bytes: number;
  /** Connecting takes at most this long (within `timeout_ms`); unset: only `timeout_ms` bounds it. */
  connect_timeout_ms?: number;
  /** Signs the request (request identity v1). */
  signer?: RequestSigner;
}

/** The request's headers, signed for `path` when a signer is given (the identity last, so nothing replaces it). */
function headersFor(req: FetchRequest, path: string): Record<string, string> {
  return req.signer === undefined ? req.headers : { ...req.headers, ...req.signer.headers(path) };
}

function causeOf(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  if (e?.code && e.message && !e.message.includes(e.code)) return `${e.message} (${e.code})`;
  return e?.message ?? String(err);
}

function headersOf(h: Record<string, string | string[] | number | undefined>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(h)) {
    if (k.startsWith(':')) continue;
    out[k] = Array.isArray(v) ? v.join(', ') : v === undefined ? undefined : String(v);
  }
  return out;
}

/** Collects a body up to `max` bytes; past it, `onTooLarge` is called once. */
function collector(max: number, onTooLarge: () => void): { push(chunk: Buffer): void; body(): Buffer } {
  const chunks: Buffer[] = [];
  let size = 0;
  let over = false;
  return {
    push(chunk) {
      if (over) return;
      size += chunk.length;
      if (size > max) {
        over = true;
        onTooLarge();
        return;
      }
      chunks.push(chunk);
    },
    body: () => Buffer.concat(chunks),
  };
}

/** HTTP/2 with prior knowledge for http:, ALPN for https:. */
export function fetchHttp2(url: URL, req: FetchRequest): Promise<FetchResponse> {
  return new Promise<FetchResponse>((resolve, reject) => {
    let connected = false;
    let gotFrame = false;
    let done = false;
    let session: http2.ClientHttp2Session;
    const finish = (err: FetchError | undefined, res?: FetchResponse) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      session?.destroy();
      if (err) reject(err);
      else resolve(res!);
    };
    // A silent peer is unreachable, not HTTP/1.1: an HTTP/1.1 server answers the h2 preface with an error.
    const timer = setTimeout(() => finish(new FetchError('unreachable', `timed out after ${req.timeout_ms} ms`)), req.timeout_ms);
    const failed = (why: string, err?: unknown) =>
      finish(connected && !gotFrame ? new FetchError('http1-only', why, { cause: err }) : new FetchError('unreachable', why, { cause: err }));
    try {
      session = http2.connect(url.origin);
    } catch (err) {
      finish(new FetchError('invalid-request', causeOf(err), { cause: err }));
      return;
    }
    session.on('connect', () => (connected = true));
    if (req.connect_timeout_ms !== undefined && req.connect_timeout_ms < req.timeout_ms) {
      const ms = req.connect_timeout_ms;
      const connectTimer = setTimeout(() => {
        if (!connected) finish(new FetchError('unreachable', `could not connect within ${ms} ms`));
      }, ms);
      connectTimer.unref();
    }
    session.on('remoteSettings', () => (gotFrame = true));
    session.on('error', (err) => failed(`h2 connection error: ${causeOf(err)}`, err));
    session.on('close', () => failed(connected && !gotFrame ? 'connection closed before any HTTP/2 frame' : 'connection closed before a response'));
    let stream: http2.ClientHttp2Stream;
    try {
      stream = session.request({ ':method': req.method, ':path': url.pathname + url.search, ...headersFor(req, url.pathname) });
    } catch (err) {
      finish(new FetchError('invalid-request', causeOf(err), { cause: err }));
      return;
    }
    stream.on('error', (err) => failed(causeOf(err), err));
    stream.on('response', (h) => {
      gotFrame = true;
      const body = collector(req.max_body_bytes, () => finish(new FetchError('too-large', `the answer is larger than ${req.max_body_bytes} bytes`)));
      stream.on('data', (c: Buffer) => body.push(c));
      stream.on('end', () => finish(undefined, { status: Number(h[':status']), headers: headersOf(h), body: body.body() }));
    });
    stream.end();
  });
}

export function fetchHttp1(url: URL, req: FetchRequest): Promise<FetchResponse> {
  return new Promise<FetchResponse>((resolve, reject) => {
    const mod = url.protocol === 'https:' ? https : http;
    let done = false;
    let request: http.ClientRequest | undefined;
    const finish = (err: FetchError | undefined, res?: FetchResponse) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) {
        request?.destroy();
        reject(err);
      } else resolve(res!);
    };
    const timer = setTimeout(() => finish(new FetchError('unreachable', `timed out after ${req.timeout_ms} ms`)), req.timeout_ms);
    try {
      request = mod.request(url, { method: req.method, headers: headersFor(req, url.pathname), agent: false }, (res) => {
        const body = collector(req.max_body_bytes, () => finish(new FetchError('too-large', `the answer is larger than ${req.max_body_bytes} bytes`)));
        res.on('data', (c: Buffer) => body.push(c));
        res.on('error', (err) => finish(new FetchError('unreachable', causeOf(err), { cause: err })));
        res.on('end', () => finish(undefined, { status: res.statusCode ?? 0, headers: headersOf(res.headers), body: body.body() }));
      });
    } catch (err) {
      // http.request throws at once on a header value it refuses (CR LF, say).
      finish(new FetchError('invalid-request', causeOf(err), { cause: err }));
      return;
    }
    request.on('error', (err) => finish(new FetchError('unreachable', causeOf(err), { cause: err })));
    if (req.connect_timeout_ms !== undefined) request.on('socket', (socket) => socket.connecting && boundConnect(socket, req.connect_timeout_ms!));
    request.end();
  });
}

/** A request carried in a Lambda invoke of the qualified ARN. */
export async function fetchLambda(arn: string, assume_role_arn: string | undefined, path: string, req: FetchRequest): Promise<FetchResponse> {
  try {
    const r = await invokeLambda({ arn, assume_role_arn, method: req.method, path, headers: headersFor(req, path), body: Buffer.alloc(0), timeoutMs: req.timeout_ms });
    if (r.body.length > req.max_body_bytes) throw new FetchError('too-large', `the answer is larger than ${req.max_body_bytes} bytes`);
    return { status: r.status, headers: r.headers, body: r.body };
  } catch (err) {
    if (err instanceof LambdaFunctionError || err instanceof LambdaApiError) throw new FetchError('function-error', err.message, { cause: err });
    throw err;
  }
}
