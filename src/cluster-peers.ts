// Requests between the nodes of a cluster (a request forwarded to a partition's leader, commands
// handed to a partition led elsewhere, a standby's SQL): HTTP/2 in clear text with prior knowledge,
// which every node's ingress and admin serve (ingress/h2c.ts). One session per peer address, kept
// open and shared by every request to it: no connection set up per request, no head-of-line
// blocking between them. Requests carry the cluster's own bearer token (`cluster.auth_token`)
// where one is set: the node asked has checked the client's, and the peer trusts the cluster's.
import http2 from 'node:http2';

/** The node asked, named on every request it makes (a request already forwarded is not forwarded again). */
export const FORWARDED_BY = 'x-keel-forwarded-by';
/** A session with no stream open for this long is closed (a peer seldom asked costs nothing). */
const IDLE_SESSION_MS = 60_000;
/** Peer addresses with a session at once: a cluster has a few nodes, each with two servers. */
const MAX_SESSIONS = 256;

export interface PeerResponse {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
}

export class PeerClient {
  private readonly sessions = new Map<string, http2.ClientHttp2Session>();

  constructor(
    readonly node: string,
    /** The cluster's token, sent instead of the client's; undefined: the request's own authorization goes on. */
    private readonly token: string | undefined,
  ) {}

  /** Whether requests carry the cluster's token (and so need not carry the client's). */
  get authenticates(): boolean {
    return this.token !== undefined;
  }

  /** Opens a request to `url`; the caller writes its body and reads the answer from the stream. */
  open(url: URL, method: string, headers: http2.OutgoingHttpHeaders): http2.ClientHttp2Stream {
    const h: http2.OutgoingHttpHeaders = { ...headers, ':method': method, ':path': `${url.pathname}${url.search}`, [FORWARDED_BY]: this.node };
    if (this.token !== undefined) h.authorization = `Bearer ${this.token}`;
    // Open for a body whatever the method (Node ends a GET's at once): the caller ends it.
    return this.session(url.origin).request(h, { endStream: false });
  }

  /** One whole request and its answer, failing after `timeout_ms` without one or once `signal` aborts. */
  request(url: URL, method: string, headers: http2.OutgoingHttpHeaders, body: Buffer, { timeout_ms, signal }: { timeout_ms: number; signal?: AbortSignal }): Promise<PeerResponse> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted === true) return reject(signal.reason as Error);
      let stream: http2.ClientHttp2Stream;
      try {
        stream = this.open(url, method, { ...headers, 'content-length': String(body.length) });
      } catch (err) {
        return reject(err as Error);
      }
      let answer: Omit<PeerResponse, 'body'> | undefined;
      const chunks: Buffer[] = [];
      const cancel = (why: Error): void => stream.close(http2.constants.NGHTTP2_CANCEL, () => reject(why));
      stream.setTimeout(timeout_ms, () => cancel(new Error(`no answer in ${timeout_ms} ms`)));
      const aborted = (): void => cancel(signal!.reason as Error);
      signal?.addEventListener('abort', aborted, { once: true });
      stream.on('response', (h) => void (answer = { status: Number(h[':status']), headers: h }));
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', reject);
      stream.on('close', () => {
        signal?.removeEventListener('abort', aborted);
        if (answer === undefined) return reject(new Error(`the stream closed without an answer (code ${stream.rstCode})`));
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
    if (open !== undefined && !open.closed && !open.destroyed) return open;
    if (this.sessions.size >= MAX_SESSIONS) this.close();
    const session = http2.connect(origin);
    // A session's failure (refused, reset) fails its streams, which report it to their callers.
    session.on('error', () => {});
    const forget = (): void => {
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
