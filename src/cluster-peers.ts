// Requests between the nodes of a cluster (a request forwarded to a partition's leader, commands
// handed to a partition led elsewhere, a standby's SQL): HTTP/2 in clear text with prior knowledge,
// which every node's ingress and admin serve (ingress/h2c.ts). One session per peer address, kept
// open and shared by every request to it: no connection set up per request, no head-of-line
// blocking between them. Where the cluster has its own token (`cluster.auth_token`), requests carry
// it in a header of their own: the client's `authorization` goes on untouched (it is the client's,
// and may reach a handler), and the cluster's never does.
import http2 from 'node:http2';
import { NODE_HEADERS } from './ingress/auth.js';

/**
 * A session with no traffic for this long is closed: below the servers' `http.idle_timeout`
 * (60 s by default), so this side closes first rather than race the peer's GOAWAY with a request.
 */
const IDLE_SESSION_MS = 30_000;
/** A peer that does not accept the connection in this long (an address that drops packets) fails its requests. */
const CONNECT_TIMEOUT_MS = 5_000;
/** Peer addresses with a session at once: a cluster has a few nodes, each with two servers. */
const MAX_SESSIONS = 256;
/** Stream ids of a session run out at 2^31 (odd ids for the client): a new session well before. */
const MAX_STREAM_ID = 2 ** 30;

export interface PeerResponse {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
}

export class PeerClient {
  private readonly sessions = new Map<string, http2.ClientHttp2Session>();

  constructor(
    readonly node: string,
    /** The cluster's token; undefined: requests carry only what their caller gives. */
    private readonly token: string | undefined,
  ) {}

  /**
   * Opens a request for `path` (sent as it is, never resolved against anything: the peer sees
   * what this node was asked) at `base`'s origin; the caller writes the body and reads the answer.
   */
  open(base: string, path: string, method: string, headers: http2.OutgoingHttpHeaders): http2.ClientHttp2Stream {
    if (!path.startsWith('/')) throw new Error(`not a path: ${JSON.stringify(path.slice(0, 100))}`);
    const h: http2.OutgoingHttpHeaders = { ...headers, ':method': method, ':path': path, [NODE_HEADERS.forwarded_by]: this.node };
    if (this.token !== undefined) h[NODE_HEADERS.token] = this.token;
    // Open for a body whatever the method (Node ends a GET's at once): the caller ends it.
    return this.session(new URL(base).origin).request(h, { endStream: false });
  }

  /**
   * One whole request and its answer. Fails after `timeout_ms` without the whole answer, once
   * `signal` aborts, or when the answer is cut off (a peer that dies mid-answer never passes for
   * a short one).
   */
  request(base: string, path: string, method: string, headers: http2.OutgoingHttpHeaders, body: Buffer, { timeout_ms, signal }: { timeout_ms: number; signal?: AbortSignal }): Promise<PeerResponse> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted === true) return reject(signal.reason as Error);
      let stream: http2.ClientHttp2Stream;
      try {
        stream = this.open(base, path, method, { ...headers, 'content-length': String(body.length) });
      } catch (err) {
        return reject(err as Error);
      }
      let answer: Omit<PeerResponse, 'body'> | undefined;
      let ended = false;
      let failure: Error | undefined;
      const chunks: Buffer[] = [];
      const fail = (why: Error): void => {
        failure ??= why;
        stream.destroy(why);
      };
      stream.setTimeout(timeout_ms, () => fail(new Error(`no answer in ${timeout_ms} ms`)));
      const aborted = (): void => fail(signal!.reason as Error);
      signal?.addEventListener('abort', aborted, { once: true });
      stream.on('response', (h) => void (answer = { status: Number(h[':status']), headers: h }));
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => void (ended = true));
      stream.on('error', (err) => void (failure ??= err));
      stream.on('close', () => {
        signal?.removeEventListener('abort', aborted);
        if (failure !== undefined) return reject(failure);
        if (answer === undefined || !ended || stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR) {
          return reject(new Error(`the answer was cut off (HTTP/2 code ${stream.rstCode})`));
        }
        resolve({ ...answer, body: Buffer.concat(chunks) });
      });
      stream.end(body);
    });
  }

  close(): void {
    for (const s of this.sessions.values()) s.close();
    this.sessions.clear();
  }

  private session(origin: string): http2.ClientHttp2Session {
    const open = this.sessions.get(origin);
    if (open !== undefined && !open.closed && !open.destroyed && (open.state.nextStreamID ?? 0) < MAX_STREAM_ID) return open;
    open?.close(); // its streams finish; new ones go to a new session
    if (this.sessions.size >= MAX_SESSIONS) this.close();
    const session = http2.connect(origin);
    // A session's failure (refused, reset, not connected in time) fails its streams, which report it to their callers.
    session.on('error', () => {});
    const connecting = setTimeout(() => session.destroy(new Error(`no connection to ${origin} in ${CONNECT_TIMEOUT_MS} ms`)), CONNECT_TIMEOUT_MS);
    connecting.unref();
    session.once('connect', () => clearTimeout(connecting));
    const forget = (): void => {
      clearTimeout(connecting);
      if (this.sessions.get(origin) === session) this.sessions.delete(origin);
    };
    session.on('close', forget);
    session.on('goaway', forget);
    session.setTimeout(IDLE_SESSION_MS, () => session.close());
    session.unref();
    this.sessions.set(origin, session);
    return session;
  }
}
